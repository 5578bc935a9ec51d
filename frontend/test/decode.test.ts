import { test } from "node:test";
import assert from "node:assert/strict";
import { decodeEvents, decodeFloat, decodeHeatmap, decodeLayer, decodeMeta, decodeRuns, DecodeError } from "../src/decode";

test("decodeFloat maps TensorBoard's non-finite strings and null", () => {
  assert.equal(decodeFloat(1.5), 1.5);
  assert.equal(decodeFloat("Infinity"), Infinity);
  assert.equal(decodeFloat("-Infinity"), -Infinity);
  assert.ok(Number.isNaN(decodeFloat("NaN")));
  assert.ok(Number.isNaN(decodeFloat(null)));
  assert.ok(Number.isNaN(decodeFloat("<script>")));
});

test("decodeHeatmap builds typed arrays and checks sizes", () => {
  const raw = {
    run: "r", metric: "grad_norm", rows: 2, cols: 3, layers: ["a", "b"],
    col_start: [0, 2, 4], col_end: [1, 3, 5],
    values: [1, "NaN", "Infinity", 0.5, null, "-Infinity"],
    states: [0, 255, 3, 0, 255, 3],
  };
  const hm = decodeHeatmap(raw);
  assert.equal(hm.values.length, 6);
  assert.equal(hm.values[0], 1);
  assert.ok(Number.isNaN(hm.values[1]));
  assert.equal(hm.values[2], Infinity);
  assert.equal(hm.values[5], -Infinity);
  assert.deepEqual(Array.from(hm.states), [0, 255, 3, 0, 255, 3]);
  assert.throws(() => decodeHeatmap({ ...raw, values: [1, 2] }), DecodeError);
  assert.throws(() => decodeHeatmap({ ...raw, layers: ["a"] }), DecodeError);
});

test("decodeRuns keeps root causes and defaults missing counts", () => {
  const runs = decodeRuns({
    runs: [
      { run: "bad", status: "failing", root_cause: { kind: "nonfinite", layer: "fc1", step: 7, message: "m" }, num_layers: 3, first_step: 0, last_step: 9, num_steps: 10, num_events: 2 },
      { run: "ok", status: "healthy", root_cause: null },
    ],
  });
  assert.equal(runs[0].root_cause?.layer, "fc1");
  assert.equal(runs[1].root_cause, null);
  assert.equal(runs[1].num_steps, 0);
  assert.throws(() => decodeRuns({ runs: {} }), DecodeError);
});

test("decodeMeta, decodeEvents and decodeLayer", () => {
  const meta = decodeMeta({
    run: "r", layers: [{ name: "<input>", type: "input" }], metrics: ["grad_norm"],
    states: [{ code: 0, name: "healthy", severity: "info" }, { code: 3, name: "nonfinite", severity: "error" }],
    first_step: 0, last_step: 4, num_steps: 5,
  });
  assert.equal(meta.states[1].severity, "error");
  const ev = decodeEvents({ run: "r", total: 1, truncated: false, events: [{ step: 3, layer: "fc", kind: "nonfinite", from_state: "healthy", to_state: "nonfinite", value: "NaN", severity: "error", message: "x" }] });
  assert.ok(Number.isNaN(ev.events[0].value));
  const layer = decodeLayer({ run: "r", layer: "fc", type: "Linear", steps: [0, 1], metrics: { grad_norm: [1, "Infinity"] }, states: [0, 2], events: [] });
  assert.equal(layer.metrics.grad_norm[1], Infinity);
  assert.deepEqual(Array.from(layer.states), [0, 2]);
  assert.throws(() => decodeLayer({ run: "r", layer: "fc", steps: [0], metrics: { grad_norm: [1, 2] }, states: [0] }), DecodeError);
});
