import { test } from "node:test";
import assert from "node:assert/strict";
import {
  buildPalette, cellColor, colorIndices, computeScale, selectKth, HEALTHY_FLAT, NO_DATA, RAMP_SIZE, RAMP_START,
  rampColor, scalePosition, scaleValue, STATE_START,
} from "../src/colormap";
import { BUILTIN_TABLES } from "../src/tables";
import { lcg } from "./fixtures";

const TABLE = BUILTIN_TABLES.states;
const STATES = TABLE.states;

test("log scale spans the healthy values only", () => {
  const values = new Float32Array([1e-4, 1e-2, 1e6, NaN]);
  const states = new Uint8Array([0, 0, 2, 255]);
  const s = computeScale("log", [{ values, states }]);
  assert.ok(Math.abs(s.lo + 4) < 1e-6 && Math.abs(s.hi + 2) < 1e-6, `${s.lo} ${s.hi}`);
  assert.ok(Math.abs(scalePosition(s, 1e-3) - 0.5) < 1e-6);
  assert.equal(scalePosition(s, 1e9), 1);
  assert.equal(scalePosition(s, 0), 0);
  assert.ok(Math.abs(scaleValue(s, 0.5) / 1e-3 - 1) < 1e-6);
});

test("one outlier does not flatten the ramp (robust percentiles)", () => {
  const n = 1000;
  const values = new Float32Array(n).map((_, i) => 10 ** (-3 + (2 * i) / (n - 1))); // 1e-3 .. 1e-1
  values[7] = 1e12;
  const s = computeScale("log", [{ values, states: new Uint8Array(n) }]);
  assert.ok(s.hi < -0.9 && s.lo < -2.9, `${s.lo} ${s.hi}`);
  assert.equal(cellColor(s, 1e12, 0), RAMP_START + RAMP_SIZE - 1); // clamps to the top
});

test("flat or empty data still gives a usable log scale", () => {
  const one = computeScale("log", [{ values: new Float32Array([5, 5]), states: new Uint8Array([0, 0]) }]);
  assert.ok(one.hi > one.lo);
  const none = computeScale("log", [{ values: new Float32Array([NaN]), states: new Uint8Array([255]) }]);
  assert.ok(none.hi > none.lo);
  assert.deepEqual(computeScale("linear", []), { kind: "linear", lo: 0, hi: 1 });
});

test("a failing state wins over the value; NaN is no data", () => {
  const s = { kind: "log" as const, lo: -4, hi: 0 };
  assert.equal(cellColor(s, 1e-4, 0), RAMP_START);
  assert.equal(cellColor(s, 1, 0), RAMP_START + RAMP_SIZE - 1);
  assert.equal(cellColor(s, 1e-2, 255), RAMP_START + Math.round(0.5 * (RAMP_SIZE - 1)));
  assert.equal(cellColor(s, 1e-2, 1), STATE_START + 1);
  assert.equal(cellColor(s, NaN, 0), NO_DATA);
  assert.equal(cellColor(s, Infinity, 0), STATE_START + 3);
  const st = { kind: "state" as const, lo: 0, hi: 1 };
  assert.equal(cellColor(st, 0, 0), HEALTHY_FLAT);
  assert.equal(cellColor(st, 5, 5), STATE_START + 5);
  assert.equal(cellColor(st, NaN, 255), NO_DATA);
});

test("colorIndices reuses the output buffer of the same size", () => {
  const s = { kind: "linear" as const, lo: 0, hi: 1 };
  const out = new Uint8Array(3);
  const idx = colorIndices(s, new Float32Array([0, 1, NaN]), new Uint8Array([0, 0, 0]), out);
  assert.equal(idx, out);
  assert.deepEqual(Array.from(idx), [RAMP_START, RAMP_START + RAMP_SIZE - 1, NO_DATA]);
});

test("the fast colorIndices agrees with cellColor on every cell", () => {
  const rand = lcg(3);
  const n = 20000;
  const values = new Float32Array(n);
  const states = new Uint8Array(n);
  const specials = [0, -0, NaN, Infinity, -Infinity, 1e-45, -3e-7, 3.4e38];
  for (let i = 0; i < n; i++) {
    values[i] = i < specials.length ? specials[i] : (rand() < 0.5 ? -1 : 1) * 10 ** (-8 + 10 * rand());
    states[i] = rand() < 0.05 ? Math.floor(rand() * 256) : rand() < 0.5 ? 0 : 255;
  }
  for (const scale of [
    computeScale("log", [{ values, states }]),
    { kind: "log" as const, lo: -3.3, hi: 0.7 },
    { kind: "linear" as const, lo: 0, hi: 1 },
    { kind: "state" as const, lo: 0, hi: 1 },
  ]) {
    const idx = colorIndices(scale, values, states);
    for (let i = 0; i < n; i++) assert.equal(idx[i], cellColor(scale, values[i], states[i]), `${scale.kind} ${values[i]} ${states[i]}`);
    // A row of a matrix: unaligned, of odd length (cells one by one at both ends).
    for (const [a, b] of [[1, 4998], [3, 10], [2, 3], [5, 5]]) {
      const part = colorIndices(scale, values.subarray(a, b), states.subarray(a, b), new Uint8Array(20000).subarray(a + 7, b + 7));
      for (let i = a; i < b; i++) assert.equal(part[i - a], cellColor(scale, values[i], states[i]), `${scale.kind} row ${a}-${b} at ${i}`);
    }
  }
});

test("every failing state has its own colour, distinct from the ramp and from no data", () => {
  const p = buildPalette(TABLE);
  const stateColors = STATES.slice(1).map((s) => p[STATE_START + s.code]);
  assert.equal(new Set(stateColors).size, stateColors.length);
  const ramp = new Set(p.slice(RAMP_START, RAMP_START + RAMP_SIZE));
  for (const c of stateColors) assert.ok(!ramp.has(c) && c !== p[NO_DATA], c);
  // The palette paints with the table's colours.
  for (const s of STATES.slice(1)) assert.equal(p[STATE_START + s.code], s.color, s.name);
  assert.equal(p[NO_DATA], TABLE.colors.no_data);
  assert.equal(p[HEALTHY_FLAT], TABLE.healthyColor());
  assert.equal(p[STATE_START + 200], TABLE.colors.unknown_state);
});

test("ramp goes from light to dark", () => {
  const lum = (h: string) => parseInt(h.slice(1, 3), 16) + parseInt(h.slice(3, 5), 16) + parseInt(h.slice(5, 7), 16);
  assert.ok(lum(rampColor(0)) > lum(rampColor(0.5)));
  assert.ok(lum(rampColor(0.5)) > lum(rampColor(1)));
  assert.match(rampColor(0.37), /^#[0-9a-f]{6}$/);
});

test("the scale's percentiles are those of the sorted sample (selection, not a sort)", () => {
  const rand = lcg(11);
  for (const n of [1, 2, 3, 17, 1000, 77777]) {
    const values = Float32Array.from({ length: n }, () => (rand() < 0.5 ? -1 : 1) * 10 ** (-9 + 12 * rand()));
    const states = Uint8Array.from({ length: n }, () => (rand() < 0.1 ? 2 : 0));
    const stride = Math.max(1, Math.ceil(n / 50000));
    const logs: number[] = [];
    for (let i = 0; i < n; i += stride) if (states[i] === 0) logs.push(Math.log10(Math.abs(values[i])));
    logs.sort((a, b) => a - b);
    const at = (q: number) => logs[Math.round(q * (logs.length - 1))];
    const s = computeScale("log", [{ values, states }]);
    if (logs.length && at(0.98) - at(0.02) >= 1e-6) assert.deepEqual(s, { kind: "log", lo: at(0.02), hi: at(0.98) }, `n=${n}`);
  }
  const a = Float64Array.from([5, 1, 4, 1, 5, 9, 2, 6, 5, 3]);
  const sorted = [...a].sort((x, y) => x - y);
  for (let k = 0; k < a.length; k++) assert.equal(selectKth(Float64Array.from(a), 0, a.length - 1, k), sorted[k]);
});
