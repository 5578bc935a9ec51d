import { test } from "node:test";
import assert from "node:assert/strict";
import { decodeBase64, decodeEvents, decodeFloat, decodeFloat32B64, decodeHeatmap, decodeLayer, decodeMeta, decodeRuns, DecodeError } from "../src/decode";

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

/** base64 of little-endian float32, built independently of the decoder (DataView + btoa). */
function f32b64(xs: number[]): string {
  const dv = new DataView(new ArrayBuffer(xs.length * 4));
  xs.forEach((x, i) => dv.setFloat32(i * 4, x, true));
  let bin = "";
  for (const b of new Uint8Array(dv.buffer)) bin += String.fromCharCode(b);
  return btoa(bin);
}

test("decodeFloat32B64 reads numpy's '<f4' bytes: NaN, +-Infinity, exact values", () => {
  // np.array([1.5, nan, inf, -inf, 0.1, 3.4028235e38, 1e-45, -0.0], "<f4").tobytes(), base64
  const fromNumpy = "AADAPwAAwH8AAIB/AACA/83MzD3//39/AQAAAAAAAIA=";
  const v = decodeFloat32B64(fromNumpy, 8);
  assert.equal(v[0], 1.5);
  assert.ok(Number.isNaN(v[1]));
  assert.equal(v[2], Infinity);
  assert.equal(v[3], -Infinity);
  assert.equal(v[4], Math.fround(0.1)); // 0.10000000149011612 exactly, not 0.1
  assert.equal(v[4], 0.10000000149011612);
  assert.equal(v[5], 3.4028234663852886e38); // largest float32
  assert.equal(v[6], 1.401298464324817e-45); // smallest subnormal
  assert.ok(Object.is(v[7], -0));
  assert.equal(fromNumpy, f32b64([1.5, NaN, Infinity, -Infinity, 0.1, 3.4028235e38, 1e-45, -0]));
});

test("decodeFloat32B64 round-trips every float32 bit pattern it is given", () => {
  const xs = [Math.fround(Math.PI), -Math.fround(1e-30), 16777216, Math.fround(123456.789), 2 ** -149, -(2 ** 127)];
  const v = decodeFloat32B64(f32b64(xs), xs.length);
  assert.deepEqual(Array.from(v), xs);
  assert.equal(v.byteOffset % 4, 0);
  assert.throws(() => decodeFloat32B64(f32b64(xs), xs.length + 1), DecodeError);
  assert.throws(() => decodeFloat32B64("not base64!", 1), DecodeError);
  assert.equal(decodeFloat32B64("", 0).length, 0);
  assert.deepEqual(Array.from(decodeBase64("AP8DAP8DAAE=")), [0, 255, 3, 0, 255, 3, 0, 1]);
});

test("decodeHeatmap reads the format=b64 answer", () => {
  const raw = {
    run: "r", metric: "grad_norm", rows: 2, cols: 3, layers: ["a", "b"],
    col_start: [0, 2, 4], col_end: [1, 3, 5],
    values_b64: f32b64([1, NaN, Infinity, 0.1, NaN, -Infinity]),
    states_b64: btoa(String.fromCharCode(0, 255, 3, 0, 255, 3)),
  };
  const hm = decodeHeatmap(raw);
  assert.ok(hm.values instanceof Float32Array && hm.states instanceof Uint8Array);
  assert.equal(hm.values[0], 1);
  assert.ok(Number.isNaN(hm.values[1]) && Number.isNaN(hm.values[4]));
  assert.equal(hm.values[2], Infinity);
  assert.equal(hm.values[3], Math.fround(0.1));
  assert.equal(hm.values[5], -Infinity);
  assert.deepEqual(Array.from(hm.states), [0, 255, 3, 0, 255, 3]);
  // Same matrix as the JSON form.
  const json = decodeHeatmap({ ...raw, values_b64: undefined, states_b64: undefined,
    values: [1, "NaN", "Infinity", 0.1, "NaN", "-Infinity"], states: [0, 255, 3, 0, 255, 3] });
  assert.deepEqual(Array.from(json.values, String), Array.from(hm.values, String));
  assert.throws(() => decodeHeatmap({ ...raw, states_b64: btoa("\u0000") }), DecodeError);
  assert.throws(() => decodeHeatmap({ ...raw, values_b64: f32b64([1, 2]) }), DecodeError);
  assert.throws(() => decodeHeatmap({ ...raw, values_b64: 5 }), DecodeError);
  const empty = decodeHeatmap({ ...raw, rows: 2, cols: 0, col_start: [], col_end: [], values_b64: "", states_b64: "" });
  assert.equal(empty.values.length, 0);
});
