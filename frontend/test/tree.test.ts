import { test } from "node:test";
import assert from "node:assert/strict";
import { buildTree, defaultExpansion, MAX_SIBLINGS, RowKind, segmentsOf, visibleRows, type ModuleTree } from "../src/tree";
import { transformerLayers } from "./fixtures";

const ids = (tree: ModuleTree, list: readonly number[]) => list.map((n) => tree.nodes[n].id);
const node = (tree: ModuleTree, id: string) => tree.nodes[tree.byId.get(id)!];
/** Visible rows as "id:kind" with kind L(eaf), G(roup), O(pen). */
function shown(tree: ModuleTree, open: (id: string) => boolean, extra: Parameters<typeof visibleRows>[1] = { expanded: () => false }): string[] {
  return visibleRows(tree, { ...extra, expanded: (n) => open(n.id) }).map((v) => `${tree.nodes[v.node].id}:${"LGO"[v.kind]}`);
}

test("rows become a module tree in forward order; pseudo-layers stay top-level", () => {
  const tree = buildTree(["<input>", "embed", "blocks.0.fc1", "blocks.0.fc2", "blocks.1.fc1", "blocks.1.fc2", "head", "<loss>", "<optimizer>"]);
  assert.deepEqual(ids(tree, tree.roots), ["<input>", "embed", "blocks", "head", "<loss>", "<optimizer>"]);
  const blocks = node(tree, "blocks");
  assert.equal(blocks.layer, -1);
  assert.deepEqual(ids(tree, blocks.children), ["blocks.0", "blocks.1"]);
  assert.deepEqual(ids(tree, node(tree, "blocks.1").children), ["blocks.1.fc1", "blocks.1.fc2"]);
  assert.equal(node(tree, "blocks.1.fc2").label, "fc2");
  assert.equal(node(tree, "blocks.1.fc2").depth, 2);
  assert.deepEqual([...blocks.rows], [2, 3, 4, 5]);
  assert.equal(node(tree, "blocks.0.fc1").layer, 2);
  assert.equal(tree.nodeOfLayer[6], tree.byId.get("head"));
});

test("a name is split on dots, a pseudo-layer or an odd name is not", () => {
  assert.deepEqual(segmentsOf("encoder.layers.3.linear1"), ["encoder", "layers", "3", "linear1"]);
  assert.deepEqual(segmentsOf("<optimizer>"), ["<optimizer>"]);
  assert.deepEqual(segmentsOf("<row 7>"), ["<row 7>"]);
  assert.deepEqual(segmentsOf("a..b"), ["a..b"]);
  assert.deepEqual(segmentsOf("<img src=x onerror=a.b>fc1"), ["<img src=x onerror=a", "b>fc1"]);
});

test("single-child chains are one node; a group of one row is that row", () => {
  const tree = buildTree(["<input>", "model.encoder.layers.0.fc", "model.encoder.layers.1.fc", "model.head.out", "<loss>"]);
  // model -> {encoder -> layers -> {0, 1}, head -> out}: "encoder.layers" is one level, "head.out" one row.
  assert.deepEqual(ids(tree, tree.roots), ["<input>", "model", "<loss>"]);
  const model = node(tree, "model");
  assert.deepEqual(ids(tree, model.children), ["model.encoder.layers", "model.head.out"]);
  assert.equal(node(tree, "model.encoder.layers").label, "encoder.layers");
  assert.equal(node(tree, "model.head.out").label, "head.out");
  assert.equal(node(tree, "model.head.out").layer, 3);
  // "0" holds only "fc": the row is "0.fc" under encoder.layers.
  assert.deepEqual(ids(tree, node(tree, "model.encoder.layers").children), ["model.encoder.layers.0.fc", "model.encoder.layers.1.fc"]);
  assert.equal(node(tree, "model.encoder.layers.0.fc").label, "0.fc");
  // A top-level chain: "net" holding only "body" holding two rows.
  const t2 = buildTree(["net.body.a", "net.body.b"]);
  assert.deepEqual(ids(t2, t2.roots), ["net.body"]);
  assert.equal(node(t2, "net.body").label, "net.body");
});

test("a module with rows of its own and children is both a row and a group", () => {
  const tree = buildTree(["<input>", "attn", "attn.out_proj", "fc"]);
  const attn = node(tree, "attn");
  assert.equal(attn.layer, 1);
  assert.deepEqual(ids(tree, attn.children), ["attn.out_proj"]);
  assert.deepEqual([...attn.rows], [1, 2]);
  // Expanded: its own row of data, then the child; collapsed: one group of both.
  assert.deepEqual(shown(tree, () => true), ["<input>:L", "attn:O", "attn.out_proj:L", "fc:L"]);
  const rows = visibleRows(tree, { expanded: () => true });
  assert.deepEqual([...rows[1].rows], [1]);
  assert.deepEqual(shown(tree, () => false), ["<input>:L", "attn:G", "fc:L"]);
  assert.deepEqual([...visibleRows(tree, { expanded: () => false })[1].rows], [1, 2]);
});

test("siblings in forward order even when the forward pass interleaves groups", () => {
  const tree = buildTree(["enc.a", "dec.x", "enc.b", "dec.y"]);
  assert.deepEqual(ids(tree, tree.roots), ["enc", "dec"]);
  assert.deepEqual([...node(tree, "enc").rows], [0, 2]);
});

test("too many siblings are split into ranges of 10, 100, ...; pseudo-layers stay out", () => {
  const names = ["<input>", ...Array.from({ length: 97 }, (_, i) => `${i}`), "<loss>"];
  const tree = buildTree(names);
  const top = ids(tree, tree.roots);
  assert.equal(top[0], "<input>");
  assert.equal(top[top.length - 1], "<loss>");
  assert.equal(top.length, 2 + 10);
  assert.equal(top[1], "[0…9]");
  assert.equal(node(tree, "[0…9]").label, "0 … 9");
  assert.ok(node(tree, "[0…9]").range);
  assert.deepEqual(ids(tree, node(tree, "[90…96]").children), ["90", "91", "92", "93", "94", "95", "96"]);
  assert.ok(tree.roots.length <= MAX_SIBLINGS);
  // 997 children: ranges of 100.
  const big = buildTree(Array.from({ length: 997 }, (_, i) => `blocks.${i}.fc`));
  const blocks = node(big, "blocks");
  assert.equal(blocks.children.length, 10);
  assert.equal(big.nodes[blocks.children[0]].children.length, 100);
  // 41 children: ranges of 10, and a lone last child is not a range.
  const odd = buildTree(Array.from({ length: 41 }, (_, i) => `x${i}`));
  assert.equal(odd.roots.length, 5);
  assert.equal(odd.nodes[odd.roots[4]].id, "x40");
});

test("repeated names stay rows of their own", () => {
  const tree = buildTree(["a.b", "a.b", "c"]);
  assert.deepEqual(ids(tree, tree.roots), ["a.b", "a.b", "c"]);
  assert.deepEqual(tree.roots.map((n) => tree.nodes[n].layer), [0, 1, 2]);
  assert.deepEqual(shown(tree, () => true), ["a.b:L", "a.b:L", "c:L"]);
});

test("expanded groups are bands followed by their children; collapsed ones hold their rows", () => {
  const tree = buildTree(["<input>", "b.0.x", "b.0.y", "b.1.x", "b.1.y", "<loss>"]);
  assert.deepEqual(shown(tree, (id) => id === "b"), ["<input>:L", "b:O", "b.0:G", "b.1:G", "<loss>:L"]);
  const rows = visibleRows(tree, { expanded: (n) => n.id === "b" });
  assert.deepEqual([...rows[1].rows], []); // a band
  assert.deepEqual([...rows[3].rows], [3, 4]);
  assert.deepEqual(shown(tree, () => false), ["<input>:L", "b:G", "<loss>:L"]);
});

test("the filter keeps matching rows and their ancestors as context", () => {
  const tree = buildTree(["<input>", "b.0.ln", "b.0.fc", "b.1.ln", "b.1.fc", "head", "<loss>"]);
  const keep = Uint8Array.from([0, 1, 0, 1, 0, 0, 0]);
  assert.deepEqual(shown(tree, () => true, { expanded: () => true, keep }), ["b:O", "b.0:O", "b.0.ln:L", "b.1:O", "b.1.ln:L"]);
  const rows = visibleRows(tree, { expanded: () => true, keep });
  assert.equal(rows[0].context, true);
  assert.equal(rows[2].context, false);
  // A collapsed group holds only the kept rows.
  const collapsed = visibleRows(tree, { expanded: () => false, keep });
  assert.deepEqual(collapsed.map((r) => [...r.rows]), [[1, 3]]);
  // A layer that is kept with none of its children is a leaf.
  const t2 = buildTree(["attn", "attn.out_proj"]);
  assert.deepEqual(visibleRows(t2, { expanded: () => true, keep: Uint8Array.from([1, 0]) }).map((r) => r.kind), [RowKind.Leaf]);
});

test("anomalies first: siblings by their earliest onset, the healthy ones in forward order after", () => {
  const tree = buildTree(["<input>", "b.0.x", "b.0.y", "b.1.x", "b.1.y", "head", "<loss>", "<optimizer>"]);
  const order = Float64Array.from([Infinity, Infinity, Infinity, 2 * 50 + 1, 2 * 40 + 1, 2 * 45 + 1, Infinity, 2 * 40]);
  // <optimizer> (root cause at 40) before b (b.1.y at 40), then head (45); the healthy keep forward order.
  assert.deepEqual(shown(tree, () => true, { expanded: () => true, order }), [
    "<optimizer>:L", "b:O", "b.1:O", "b.1.y:L", "b.1.x:L", "b.0:O", "b.0.x:L", "b.0.y:L", "head:L", "<input>:L", "<loss>:L",
  ]);
});

test("a run opens with the root cause's branch, other failures that fit, and whole levels that fit", () => {
  const layers = transformerLayers(1000).map((l) => l.name);
  const tree = buildTree(layers);
  const root = "blocks.37.mlp.fc1";
  const open = defaultExpansion(tree, [root]);
  const rows = shown(tree, (id) => open.has(id));
  assert.ok(rows.includes(`${root}:L`), "the root cause's row shows");
  for (const id of ["blocks", "blocks.[30…39]", "blocks.37", "blocks.37.mlp"]) assert.ok(open.has(id), id);
  assert.ok(rows.length <= 60, `a few dozen rows (${rows.length})`);
  assert.ok(rows.includes("blocks.[0…9]:G") && rows.includes("blocks.36:G"), "the rest stays collapsed");
  // Another failure whose branch fits is shown; one that does not fit is not.
  const more = defaultExpansion(tree, [root], ["blocks.5.ln1", "blocks.37.attn.q_proj"]);
  const rows2 = shown(tree, (id) => more.has(id));
  assert.ok(rows2.includes("blocks.37.attn.q_proj:L"));
  assert.ok(!rows2.some((r) => r.startsWith("blocks.5.ln1")) && rows2.includes("blocks.[0…9]:G"));
  assert.ok(rows2.length <= 40);
  // A small model opens whole.
  const small = buildTree(["<input>", "net.0", "net.1", "net.2", "head.fc", "head.act", "<loss>"]);
  const all = defaultExpansion(small, []);
  assert.deepEqual(shown(small, (id) => all.has(id)), ["<input>:L", "net:O", "net.0:L", "net.1:L", "net.2:L", "head:O", "head.fc:L", "head.act:L", "<loss>:L"]);
  // Levels open whole or not at all.
  const mid = buildTree(Array.from({ length: 30 }, (_, i) => `g${i % 3}.m${i}`));
  const some = defaultExpansion(mid, [], [], 25);
  assert.equal(some.size, 0, "3 groups of 10 do not fit in 25 rows: none opens");
});
