import { test } from "node:test";
import assert from "node:assert/strict";
import { RowKind } from "../src/tree";
import { treeKeyAction, keyAction, PAGE_ROWS } from "../src/keys";
import { fitLabel } from "../src/views/labels";

test("arrows move the cursor inside the grid", () => {
  assert.deepEqual(keyAction("ArrowDown", false, 2, 3, 10, 20), { kind: "move", row: 3, col: 3 });
  assert.deepEqual(keyAction("ArrowUp", false, 0, 3, 10, 20), { kind: "move", row: 0, col: 3 });
  assert.deepEqual(keyAction("ArrowRight", false, 2, 19, 10, 20), { kind: "move", row: 2, col: 19 });
  assert.deepEqual(keyAction("End", false, 2, 3, 10, 20), { kind: "move", row: 2, col: 19 });
  assert.deepEqual(keyAction("PageDown", false, 2, 3, 10, 20), { kind: "move", row: Math.min(9, 2 + PAGE_ROWS), col: 3 });
});

test("zoom, pan, open and close", () => {
  assert.deepEqual(keyAction("Enter", false, 0, 0, 1, 1), { kind: "select" });
  assert.deepEqual(keyAction("+", false, 0, 0, 1, 1), { kind: "zoom", factor: 0.5 });
  assert.deepEqual(keyAction("-", false, 0, 0, 1, 1), { kind: "zoom", factor: 2 });
  assert.deepEqual(keyAction("ArrowLeft", true, 0, 0, 1, 1), { kind: "pan", quarters: -1 });
  assert.deepEqual(keyAction("]", false, 0, 0, 1, 1), { kind: "pan", quarters: 1 });
  assert.deepEqual(keyAction("Escape", false, 0, 0, 1, 1), { kind: "escape" });
  assert.equal(keyAction("a", false, 0, 0, 1, 1), null);
});

test("long layer names are cut at the start, keeping the module's own name", () => {
  const w = (s: string) => s.length * 7;
  assert.equal(fitLabel("fc1", 100, w), "fc1");
  const cut = fitLabel("encoder.layers.11.self_attn.out_proj", 140, w);
  assert.ok(cut.startsWith("…") && "encoder.layers.11.self_attn.out_proj".endsWith(cut.slice(1)), cut);
  assert.ok(w(cut) <= 140 && w(cut) > 140 - 7, cut);
});

test("the row labels' keys: move, expand/collapse, go to parent or child, open a row", () => {
  const { Leaf, Group, Open } = RowKind;
  assert.deepEqual(treeKeyAction("ArrowDown", 3, 10, Leaf, 1), { kind: "move", row: 4 });
  assert.deepEqual(treeKeyAction("ArrowUp", 0, 10, Leaf, -1), { kind: "move", row: 0 });
  assert.deepEqual(treeKeyAction("End", 3, 10, Leaf, 1), { kind: "move", row: 9 });
  assert.deepEqual(treeKeyAction("PageDown", 3, 10, Leaf, 1), { kind: "move", row: 9 });
  assert.deepEqual(treeKeyAction("ArrowRight", 3, 10, Group, 1), { kind: "toggle", open: true });
  assert.deepEqual(treeKeyAction("ArrowRight", 3, 10, Open, 1), { kind: "move", row: 4 });
  assert.equal(treeKeyAction("ArrowRight", 3, 10, Leaf, 1), null);
  assert.deepEqual(treeKeyAction("ArrowLeft", 3, 10, Open, 1), { kind: "toggle", open: false });
  assert.deepEqual(treeKeyAction("ArrowLeft", 3, 10, Leaf, 1), { kind: "move", row: 1 });
  assert.equal(treeKeyAction("ArrowLeft", 3, 10, Group, -1), null);
  assert.deepEqual(treeKeyAction("Enter", 3, 10, Group, 1), { kind: "toggle", open: true });
  assert.deepEqual(treeKeyAction(" ", 3, 10, Open, 1), { kind: "toggle", open: false });
  assert.deepEqual(treeKeyAction("Enter", 3, 10, Leaf, 1), { kind: "activate" });
  assert.deepEqual(treeKeyAction("+", 3, 10, Group, 1), { kind: "toggle", open: true });
  assert.equal(treeKeyAction("+", 3, 10, Open, 1), null);
  assert.deepEqual(treeKeyAction("-", 3, 10, Open, 1), { kind: "toggle", open: false });
  assert.deepEqual(treeKeyAction("-", 3, 10, Leaf, 1), { kind: "move", row: 1 });
  assert.equal(treeKeyAction("x", 3, 10, Leaf, 1), null);
});
