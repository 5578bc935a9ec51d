// Runs side by side: the runs in the URL, their rows aligned, one step axis.
import { test } from "node:test";
import assert from "node:assert/strict";
import { padHeatmap, RunAlignment, unionLayers } from "../src/align";
import { cellAt, computeLayout } from "../src/layout";
import { onsetKeys } from "../src/onset";
import { RowModel } from "../src/rowmodel";
import { axisCols, axisLayout, axisStep, axisTicks, axisX } from "../src/stepaxis";
import { BUILTIN_TABLES } from "../src/tables";
import { TreeState } from "../src/treestate";
import type { Heatmap, Meta, NdEvent } from "../src/types";
import { decodeRuns, encodeRuns, readHashView, writeHashView } from "../src/urlstate";

const ODD_RUNS = ["exploding,lr=10", "a&b=c", "100% done", "ünïcode run", "with space", "#hash", "x%2Cy", "sub/dir/run"];

test("runs in the URL round-trip, whatever their names hold", () => {
  for (const runs of [["one"], ["failing", "healthy"], ODD_RUNS]) {
    assert.deepEqual(decodeRuns(encodeRuns(runs)), runs);
    const hash = writeHashView("#neuraldbg&p.other.x=1", { filter: "fc", order: "forward", runs }, "neuraldbg")!;
    assert.deepEqual(readHashView(hash), { filter: "fc", order: "forward", runs });
    assert.ok(hash.startsWith("#neuraldbg&p.other.x=1&"), hash);
  }
  // A plain pair is readable as written by hand.
  assert.equal(writeHashView("", { filter: "", order: "forward", runs: ["a", "b"] }, "neuraldbg"), "#neuraldbg&p.neuraldbg.runs=a%2Cb");
  assert.deepEqual(readHashView("#neuraldbg&p.neuraldbg.runs=a,b").runs, ["a", "b"]);
});

test("a write without runs keeps the URL's runs; an empty list drops them", () => {
  const hash = writeHashView("", { filter: "", order: "forward", runs: ["a", "b,c"] }, "neuraldbg")!;
  const kept = writeHashView(hash, { filter: "ln", order: "onset" }, "neuraldbg")!;
  assert.deepEqual(readHashView(kept), { filter: "ln", order: "onset", runs: ["a", "b,c"] });
  const dropped = writeHashView(kept, { filter: "ln", order: "onset", runs: [] }, "neuraldbg")!;
  assert.deepEqual(readHashView(dropped), { filter: "ln", order: "onset" });
});

test("decodeRuns drops empty names, repeats and malformed escapes", () => {
  assert.deepEqual(decodeRuns(""), []);
  assert.deepEqual(decodeRuns("a,,a,b"), ["a", "b"]);
  assert.deepEqual(decodeRuns("a,%E0%A4%A,b"), ["a", "b"]);
});

test("unionLayers keeps the first run's order and puts another's own layers after their neighbour", () => {
  const same = ["<input>", "fc1", "fc2", "<loss>"];
  assert.deepEqual(unionLayers([same, [...same]]), same);
  assert.deepEqual(unionLayers([["<input>", "fc1", "fc3", "<loss>"], ["<input>", "fc1", "fc2", "fc3", "<loss>", "<optimizer>"]]),
    ["<input>", "fc1", "fc2", "fc3", "<loss>", "<optimizer>"]);
  assert.deepEqual(unionLayers([["b"], ["a", "b"]]), ["a", "b"], "a layer before all shared ones goes on top");
  assert.deepEqual(unionLayers([["x", "x"], ["x"]]), ["x", "x"], "a repeated name stays two rows");
  assert.deepEqual(unionLayers([["x"], ["x", "x"]]), ["x", "x"]);
  assert.deepEqual(unionLayers([]), []);
});

function heatmap(run: string, layers: string[], cols: number, colStart: number[], colEnd: number[], fill: (r: number, c: number) => [number, number]): Heatmap {
  const values = new Float32Array(layers.length * cols);
  const states = new Uint8Array(layers.length * cols);
  layers.forEach((_, r) => {
    for (let c = 0; c < cols; c++) [values[r * cols + c], states[r * cols + c]] = fill(r, c);
  });
  return { run, metric: "grad_norm", rows: layers.length, cols, layers, colStart, colEnd, values, states };
}

const EXPL = BUILTIN_TABLES.states.states.find((s) => s.name === "exploding")!.code;
const HEALTHY = BUILTIN_TABLES.states.states.find((s) => s.name === "healthy")!.code;

test("padHeatmap gives a missing layer an empty row and moves the others' cells with their names", () => {
  const hm = heatmap("r", ["a", "c"], 2, [0, 5], [4, 9], (r, c) => [10 * r + c, HEALTHY]);
  assert.equal(padHeatmap(hm, ["a", "c"]), hm, "same rows: the same object");
  const p = padHeatmap(hm, ["a", "b", "c"]);
  assert.equal(p.rows, 3);
  assert.deepEqual(p.layers, ["a", "b", "c"]);
  assert.deepEqual([...p.values.subarray(0, 2)], [0, 1]);
  assert.ok(Number.isNaN(p.values[2]) && Number.isNaN(p.values[3]));
  assert.deepEqual([...p.states.subarray(2, 4)], [255, 255], "no data");
  assert.deepEqual([...p.values.subarray(4, 6)], [10, 11]);
});

const ev = (step: number, layer: string): NdEvent =>
  ({ step, layer, kind: "exploding_gradient", from_state: "healthy", to_state: "exploding", value: 1, severity: "error", message: "" });

function metaOf(run: string, layers: string[], last: number): Meta {
  return { run, layers: layers.map((name) => ({ name, type: "Linear" })), metrics: ["grad_norm"], states: [], metric_info: null, colors: {}, first_step: 0, last_step: last, num_steps: last + 1 };
}

test("two runs of different layer lists draw the same rows in the same order, in either order mode", () => {
  const ranks = BUILTIN_TABLES.states.ranks();
  const failing = heatmap("failing", ["<input>", "fc1", "fc2", "head", "<loss>"], 4, [0, 10, 20, 30], [9, 19, 29, 39],
    (r, c) => [1, r === 3 && c >= 2 ? EXPL : HEALTHY]);
  const healthy = heatmap("healthy", ["<input>", "fc1", "extra", "fc2", "head", "<loss>"], 2, [0, 10], [9, 19], () => [1, HEALTHY]);
  const inputs = [
    { run: "failing", heatmap: failing, events: [ev(20, "head")], rootCause: { kind: "exploding_gradient", layer: "head", step: 20, message: "" } },
    { run: "healthy", heatmap: healthy, events: [] as NdEvent[], rootCause: null },
  ];
  const alignment = new RunAlignment();
  const aligned = alignment.align(inputs, ranks);
  assert.equal(alignment.align(inputs.map((x) => ({ ...x })), ranks), aligned, "same inputs: the same answer");
  assert.deepEqual(aligned.names, ["<input>", "fc1", "extra", "fc2", "head", "<loss>"]);
  for (const order of ["forward", "onset"] as const) {
    const state = new TreeState(null);
    state.setOrder(order);
    const ids = inputs.map(({ run }) => {
      const hm = aligned.heatmaps.get(run)!;
      const meta = metaOf(run, hm.layers, run === "failing" ? 39 : 19);
      return new RowModel().view({
        heatmap: hm, meta, events: [], rootCause: null, states: BUILTIN_TABLES.states, kind: "log", state, auto: new Set(), order: aligned.order(),
      }).ids;
    });
    assert.deepEqual(ids[0], ids[1], `${order}: the rows line up`);
    if (order === "onset") assert.equal(ids[0][0], "head", "the failing run's onset puts head first in both");
  }
});

test("a run shown alone again drops the shared order", () => {
  const ranks = BUILTIN_TABLES.states.ranks();
  const names = ["a", "b"];
  const hm = heatmap("r", names, 1, [0], [9], () => [1, HEALTHY]);
  const state = new TreeState(null);
  state.setOrder("onset");
  const model = new RowModel();
  const input = { heatmap: hm, meta: metaOf("r", names, 9), events: [] as NdEvent[], rootCause: null, states: BUILTIN_TABLES.states, kind: "log" as const, state, auto: new Set<string>() };
  // Shared keys from another run in which b failed first.
  const shared = onsetKeys(names, [ev(3, "b")], null, null, ranks);
  assert.deepEqual(model.view({ ...input, order: shared }).ids, ["b", "a"]);
  assert.deepEqual(model.view(input).ids, ["a", "b"], "the key left out: the run's own order again");
});

test("one step axis: a step is at the same x in every run, whatever its binning", () => {
  const axis = { start: 0, end: 199 };
  const w = 400;
  // Run A logged every step to 199 in 4 bins of 50; run B stopped at step 99, in 100 bins of 1.
  const a = axisLayout(w, 3, [0, 50, 100, 150], [49, 99, 149, 199], axis, 10, 1);
  const bStarts = Array.from({ length: 100 }, (_, i) => i);
  const b = axisLayout(w, 3, bStarts, bStarts, axis, 10, 1);
  assert.equal(a.xEdges[2], b.xEdges[100], "step 100 starts at the same pixel in both");
  assert.equal(a.xEdges[1], b.xEdges[50]);
  assert.equal(b.xEdges[100], 200, "B fills only the half of the width its steps span");
  assert.equal(cellAt(b, 250, 5), null, "past B's last step there is no cell");
  assert.deepEqual(cellAt(b, 199.5, 5), { row: 0, col: 99 });
  assert.equal(axisX(axis, w, 100), 200);
  assert.equal(axisStep(axis, w, 200), 100);
  assert.equal(axisCols(w, { start: 0, end: 99 }, axis), 200, "B is asked for the 200 px it covers");
  const ticks = axisTicks(axis, w, 4);
  assert.deepEqual(ticks.map((t) => t.step), [0, 50, 100, 150]);
  // One run alone keeps its own layout: the shared axis changes nothing there.
  assert.deepEqual(computeLayout(w, 3, 4, 10, 1).xEdges, a.xEdges);
});
