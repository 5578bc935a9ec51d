import { test } from "node:test";
import assert from "node:assert/strict";
import { onsetKeys } from "../src/onset";
import { keptRows, parseFilter, rowMatches } from "../src/rowfilter";
import { RowModel } from "../src/rowmodel";
import { cellOf, rowOfRef } from "../src/rowview";
import { BUILTIN_TABLES } from "../src/tables";
import { RowKind } from "../src/tree";
import { MAX_TOGGLES, parseSavedExpansion, TreeState } from "../src/treestate";
import type { Heatmap, Meta, NdEvent } from "../src/types";
import { readHashView, writeHashView } from "../src/urlstate";

const states = BUILTIN_TABLES.states;
const code = (name: string) => states.states.find((s) => s.name === name)!.code;
const EXPL = code("exploding");
const SAT = code("saturated");

const LAYERS = [
  { name: "<input>", type: "input" },
  { name: "blocks.0.ln", type: "LayerNorm" },
  { name: "blocks.0.fc", type: "Linear" },
  { name: "blocks.1.ln", type: "LayerNorm" },
  { name: "blocks.1.fc", type: "Linear" },
  { name: "head", type: "Linear" },
  { name: "<loss>", type: "loss" },
];
const NAMES = LAYERS.map((l) => l.name);

function heatmapOf(cells: (rowIndex: number, col: number) => [number, number], cols = 4): Heatmap {
  const rows = NAMES.length;
  const values = new Float32Array(rows * cols);
  const st = new Uint8Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) [values[r * cols + c], st[r * cols + c]] = cells(r, c);
  return { run: "r", metric: "grad_norm", rows, cols, layers: NAMES, colStart: [0, 10, 20, 30].slice(0, cols), colEnd: [9, 19, 29, 39].slice(0, cols), values, states: st };
}

const meta = { run: "r", layers: LAYERS, metrics: [], states: [], metric_info: null, colors: {}, first_step: 0, last_step: 39, num_steps: 40 } as Meta;
const ev = (step: number, layer: string, severity: NdEvent["severity"] = "error"): NdEvent =>
  ({ step, layer, kind: "exploding_gradient", from_state: "healthy", to_state: "exploding", value: 1, severity, message: "" });

test("filter: part of a name or a type, any case; words all match; commas are alternatives", () => {
  assert.deepEqual(parseFilter("  "), []);
  assert.deepEqual(parseFilter("Blocks.1  LN, head"), [["blocks.1", "ln"], ["head"]]);
  assert.ok(rowMatches("blocks.3.norm1", "LayerNorm", parseFilter("layernorm")));
  assert.ok(rowMatches("blocks.3.norm1", "LayerNorm", parseFilter("NORM1")));
  assert.ok(!rowMatches("blocks.3.fc", "Linear", parseFilter("LayerNorm")));
  const types = new Map(LAYERS.map((l) => [l.name, l.type]));
  assert.equal(keptRows(NAMES, types, ""), null);
  assert.deepEqual([...keptRows(NAMES, types, "LayerNorm")!], [0, 1, 0, 1, 0, 0, 0]);
  assert.deepEqual([...keptRows(NAMES, types, "blocks.1 linear")!], [0, 0, 0, 0, 1, 0, 0]);
  assert.deepEqual([...keptRows(NAMES, types, "head, <loss>")!], [0, 0, 0, 0, 0, 1, 1]);
});

test("onset keys: first warning or error event, the root cause first on a tie, the heatmap for rows without events", () => {
  const hm = heatmapOf((r, c) => [1, r === 5 && c >= 2 ? EXPL : 0]);
  const keys = onsetKeys(NAMES, [ev(30, "blocks.1.fc"), ev(12, "blocks.0.fc", "info"), ev(30, "blocks.0.ln", "warning")],
    { kind: "exploding_gradient", layer: "blocks.1.fc", step: 30, message: "" }, hm, states.ranks());
  assert.equal(keys[4], 60); // root cause at 30
  assert.equal(keys[1], 61); // event at 30, not the root cause: after it
  assert.equal(keys[2], Infinity); // an info event is no failure
  assert.equal(keys[5], 2 * 20 + 1); // head: no event, first failing bin starts at step 20
  assert.equal(keys[0], Infinity);
});

test("a run's rows: collapsed groups hold the worst of their layers, refs find the row showing a layer", () => {
  const hm = heatmapOf((r, c) => [r === 2 && c === 3 ? 5e4 : 0.01 * (r + 1), r === 2 && c === 3 ? EXPL : r === 3 && c >= 1 ? SAT : 0]);
  const state = new TreeState();
  const model = new RowModel();
  const input = { heatmap: hm, meta, events: [] as NdEvent[], rootCause: null, states, kind: "log" as const, state, auto: new Set<string>() };
  const view = model.view(input);
  assert.deepEqual(view.ids, ["<input>", "blocks", "head", "<loss>"]);
  assert.deepEqual(view.kinds, [RowKind.Leaf, RowKind.Group, RowKind.Leaf, RowKind.Leaf]);
  assert.deepEqual([0, 1, 2, 3].map((c) => cellOf(view, 1, c).state), [0, SAT, SAT, EXPL]);
  assert.equal(cellOf(view, 1, 3).value, Math.fround(5e4));
  assert.equal(hm.layers[cellOf(view, 1, 3).source], "blocks.0.fc");
  assert.equal(rowOfRef(view, "blocks.1.ln"), 1);
  assert.equal(rowOfRef(view, "blocks"), 1);
  assert.equal(rowOfRef(view, "head"), 2);
  assert.equal(rowOfRef(view, "nope"), -1);
  // Same inputs, same state: the same view (no work on a redraw).
  assert.equal(model.view({ ...input }), view);
  // Expanding one group: its band, its children (collapsed), then a layer's own row.
  state.toggle("blocks", true);
  const open = model.view({ ...input });
  assert.deepEqual(open.ids, ["<input>", "blocks", "blocks.0", "blocks.1", "head", "<loss>"]);
  assert.equal(open.layer[1], -1);
  assert.equal(open.group[1], -1);
  assert.deepEqual(cellOf(open, 1, 0), { value: NaN, state: 255, source: -1 });
  assert.equal(open.parentRow[3], 1);
  assert.equal(rowOfRef(open, "blocks.1.fc"), 3);
  state.toggle("blocks.1", true);
  const deeper = model.view({ ...input });
  assert.equal(deeper.ids[4], "blocks.1.ln");
  assert.equal(cellOf(deeper, 4, 1).state, SAT);
  assert.equal(cellOf(deeper, 4, 1).value, Math.fround(0.04));
  // The filter, and the order.
  state.setFilter("LayerNorm");
  const filtered = model.view({ ...input });
  assert.deepEqual(filtered.ids, ["blocks", "blocks.0", "blocks.0.ln", "blocks.1", "blocks.1.ln"]);
  assert.deepEqual(filtered.context, [true, true, false, true, false]);
  assert.equal(filtered.rowOfLayer[2], -1);
  state.setFilter("");
  state.setOrder("onset");
  const onset = model.view({ ...input, events: [ev(10, "blocks.1.ln", "warning"), ev(30, "blocks.0.fc")] });
  assert.deepEqual(onset.ids.slice(0, 3), ["blocks", "blocks.1", "blocks.1.ln"]);
});

test("tree state: toggles win over the default, expand/collapse all forget them, a filter expands what it keeps", () => {
  const auto = new Set(["a"]);
  const s = new TreeState();
  assert.equal(s.isOpen("a", auto), true);
  assert.equal(s.isOpen("b", auto), false);
  const v = s.version;
  s.toggle("a", false);
  s.toggle("b", true);
  assert.ok(s.version > v);
  assert.equal(s.isOpen("a", auto), false);
  assert.equal(s.isOpen("b", auto), true);
  s.setFilter("fc");
  assert.equal(s.isOpen("a", auto), true, "a filter shows what it keeps");
  s.toggle("a", false);
  assert.equal(s.isOpen("a", auto), false);
  s.setFilter("fc2");
  assert.equal(s.isOpen("a", auto), true, "toggles made under a filter last until it changes");
  s.setFilter("");
  assert.equal(s.isOpen("a", auto), false, "the toggles from before the filter are back");
  s.reveal(["a", "b"], auto);
  assert.equal(s.isOpen("a", auto), true);
  s.setAll(false);
  assert.equal(s.isOpen("a", auto), false);
  assert.equal(s.isOpen("b", auto), false);
  s.setAll(true);
  assert.equal(s.isOpen("zzz", auto), true);
  // Saved and read back; garbage is refused.
  s.toggle("c", false);
  const again = new TreeState(parseSavedExpansion(JSON.parse(JSON.stringify(s.saved()))));
  assert.equal(again.isOpen("c", auto), false);
  assert.equal(again.isOpen("d", auto), true);
  assert.equal(parseSavedExpansion({ base: "sideways", toggled: {} }), null);
  assert.equal(parseSavedExpansion("x"), null);
  assert.deepEqual(parseSavedExpansion({ base: "auto", toggled: { a: true, b: "yes" } }), { base: "auto", toggled: { a: true } });
  // Bounded: the oldest toggles go.
  const many = new TreeState();
  for (let i = 0; i < MAX_TOGGLES + 10; i++) many.toggle(`g${i}`, true);
  const kept = Object.keys(many.saved().toggled);
  assert.equal(kept.length, MAX_TOGGLES);
  assert.ok(!kept.includes("g0") && kept.includes(`g${MAX_TOGGLES + 9}`));
});

test("the URL keeps filter and order as TensorBoard plugin deep links, the rest of the hash untouched", () => {
  assert.deepEqual(readHashView(""), { filter: "", order: "forward" });
  const hash = writeHashView("#neuraldbg&p.other.x=1", { filter: "Layer Norm&x=1", order: "onset" }, "neuraldbg")!;
  assert.equal(hash, "#neuraldbg&p.other.x=1&p.neuraldbg.filter=Layer%20Norm%26x%3D1&p.neuraldbg.order=onset");
  assert.deepEqual(readHashView(hash), { filter: "Layer Norm&x=1", order: "onset" });
  assert.equal(writeHashView(hash, { filter: "", order: "forward" }, "neuraldbg"), "#neuraldbg&p.other.x=1");
  assert.equal(writeHashView("", { filter: "fc", order: "forward" }, "neuraldbg"), "#neuraldbg&p.neuraldbg.filter=fc");
  assert.equal(writeHashView("", { filter: "fc", order: "forward" }), "#p.neuraldbg.filter=fc");
  assert.equal(writeHashView("#scalars", { filter: "fc", order: "forward" }, "neuraldbg"), null, "another tab's URL is left alone");
  assert.deepEqual(readHashView("#neuraldbg&p.neuraldbg.filter=%E0%A4%A"), { filter: "", order: "forward" });
  assert.deepEqual(readHashView("#neuraldbg&p.neuraldbg.order=sideways"), { filter: "", order: "forward" });
});
