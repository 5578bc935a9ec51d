import { test } from "node:test";
import assert from "node:assert/strict";
import { cellNotes, decodeNotes, holdSampled, notesSummary, skippedRuns } from "../src/cells";
import { decodeHeatmap } from "../src/decode";
import { BUILTIN_TABLES } from "../src/tables";
import { SKIPPED_TEXT, tooltipLines } from "../src/tooltip";

const VANISHING = 3; // any failing state code
const N = NaN;

test("a sampled row holds its last sample; failing and never-sampled cells stay blank", () => {
  // row 0 every step, row 1 every 3 steps, row 2 every 3 but failing at col 4
  const values = Float32Array.from([1, 2, 3, 4, 5, 6, 7, N, N, 8, N, N, N, 9, N, N, 5, N]);
  const states = new Uint8Array(18);
  states[12 + 4] = VANISHING;
  states[12 + 5] = 255;
  const held = holdSampled(values, states, 3, 6, Int32Array.from([1, 3, 3]));
  assert.deepEqual(Array.from(values.subarray(6, 12)), [7, 7, 7, 8, 8, 8]);
  assert.deepEqual(Array.from(held!.subarray(6, 12)), [0, 1, 1, 0, 1, 1]);
  // the leading blank (nothing to hold yet) and the failing cell's own value stay
  assert.ok(Number.isNaN(values[12]));
  assert.equal(values[16], 5);
  assert.equal(values[17], 5, "an unknown-state cell after a sample is held");
  assert.deepEqual(Array.from(held!.subarray(0, 6)), [0, 0, 0, 0, 0, 0]);
  assert.equal(holdSampled(values, states, 3, 6, null), null);
  assert.equal(holdSampled(Float32Array.from([1, N]), new Uint8Array(2), 1, 2, Int32Array.from([1])), null);
});

test("skipped columns become runs of hatched columns", () => {
  assert.deepEqual(skippedRuns(Int32Array.from([0, 1, 2, 0, 0, 1])), [[1, 3], [5, 6]]);
  assert.deepEqual(skippedRuns(null), []);
});

test("notes decode leniently: a wrong length or type is ignored", () => {
  const n = decodeNotes({ skipped: [0, 1], every: [1, 10, 0], empty: [null, "no parameters", 3] }, 3, 2);
  assert.deepEqual(Array.from(n.skipped!), [0, 1]);
  assert.deepEqual(Array.from(n.every!), [1, 10, 0]);
  assert.deepEqual(n.empty, [null, "no parameters", null]);
  const bad = decodeNotes({ skipped: [0], every: "x", empty: ["a"] }, 3, 2);
  assert.deepEqual(bad, { skipped: null, every: null, empty: null });
});

test("a decoded heatmap carries its notes and held cells", () => {
  const hm = decodeHeatmap({
    run: "r", metric: "act_std", rows: 2, cols: 3, layers: ["fc1", "relu1"], col_start: [0, 1, 2], col_end: [0, 1, 2],
    values: [1, "NaN", "NaN", "NaN", "NaN", "NaN"], states: [0, 0, 0, 0, 0, 0],
    skipped: [0, 1, 0], every: [10, 0], empty: [null, "no parameters"],
  });
  assert.deepEqual(Array.from(hm.values.subarray(0, 3)), [1, NaN, 1]);
  assert.equal(notesSummary(hm), "skipped=1 held=1 empty=1");
  assert.deepEqual(cellNotes(hm, 0, 1), { skipped: 1, every: 10, held: false, empty: null });
  assert.deepEqual(cellNotes(hm, 0, 2), { skipped: 0, every: 10, held: true, empty: null });
  assert.deepEqual(cellNotes(hm, -1, 1), { skipped: 1, every: undefined, held: undefined, empty: undefined });
  const old = decodeHeatmap({ run: "r", metric: "grad_norm", rows: 1, cols: 1, layers: ["a"], col_start: [0], col_end: [0], values: [1], states: [0] });
  assert.deepEqual(cellNotes(old, 0, 0), { skipped: undefined, every: undefined, held: undefined, empty: undefined });
});

test("tooltips say skipped, sampled, held and why a row is empty", () => {
  const metric = BUILTIN_TABLES.metrics.info("grad_norm");
  const base = { layer: "fc1", type: "Linear", first: 5, last: 5, value: NaN, state: "healthy", metric, events: 0 };
  assert.ok(tooltipLines({ ...base, skipped: 1 }).includes(SKIPPED_TEXT));
  assert.ok(tooltipLines({ ...base, first: 0, last: 3, skipped: 2 }).includes(`2 of 4 steps ${SKIPPED_TEXT}`));
  const held = tooltipLines({ ...base, value: 0.5, held: true, every: 100 });
  assert.ok(held.includes("Gradient norm: 0.5 (held from the last sample)"), held.join("|"));
  assert.ok(held.includes("sampled every 100 steps"));
  const empty = tooltipLines({ ...base, layer: "relu1", type: "ReLU", empty: "no parameters", every: 0 });
  assert.ok(empty.includes("Gradient norm: none (no parameters)"), empty.join("|"));
  assert.ok(!empty.some((l) => l.startsWith("sampled")));
  assert.ok(!tooltipLines(base).some((l) => l.includes("skipped") || l.includes("sampled")));
});

test("a skipped step is neither held nor 'no data'", () => {
  const values = Float32Array.from([1, N, N, N]);
  const held = holdSampled(values, new Uint8Array(4), 1, 4, Int32Array.from([10]), Int32Array.from([0, 1, 0, 0]));
  assert.deepEqual(Array.from(held!), [0, 0, 1, 1]);
  assert.ok(Number.isNaN(values[1]));
  const metric = BUILTIN_TABLES.metrics.info("grad_norm");
  const tip = tooltipLines({ layer: "fc1", type: "Linear", first: 7, last: 7, value: NaN, state: "healthy", metric, events: 0, skipped: 1 });
  // a step never judged shows no "state: healthy" (gaps are not health)
  assert.deepEqual(tip, ["fc1 (Linear)", "step 7", SKIPPED_TEXT]);
});
