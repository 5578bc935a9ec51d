import { test } from "node:test";
import assert from "node:assert/strict";
import { Api, HttpError, isAbort, Latest } from "../src/api";

function fakeFetch(routes: Record<string, unknown>, log: string[]) {
  return async (url: string) => {
    log.push(url);
    const route = url.replace("./", "").split("?")[0];
    if (!(route in routes)) return new Response("unknown run 'x'", { status: 404 });
    return new Response(JSON.stringify(routes[route]), { status: 200, headers: { "content-type": "application/json" } });
  };
}

test("relative urls with encoded parameters", async () => {
  const log: string[] = [];
  const api = new Api(fakeFetch({
    heatmap: { run: "a b/c", metric: "grad_norm", rows: 0, cols: 0, layers: [], col_start: [], col_end: [], values: [], states: [] },
  }, log));
  await api.heatmap("a b/c", "grad_norm", { start: 5, end: 9 }, 9000.7);
  assert.equal(log[0], "./heatmap?run=a+b%2Fc&metric=grad_norm&start=5&end=9&max_cols=5000&format=b64");
  await api.heatmap("a b/c", "grad_norm", null, 300);
  assert.equal(log[1], "./heatmap?run=a+b%2Fc&metric=grad_norm&max_cols=300&format=b64");
});

test("heatmap decodes the format=b64 answer", async () => {
  const bytes = new Uint8Array(new Float32Array([0.5, NaN]).buffer); // little-endian hosts (x86, arm)
  const hm = await new Api(fakeFetch({
    heatmap: { run: "r", metric: "grad_norm", rows: 1, cols: 2, layers: ["fc"], col_start: [0, 1], col_end: [0, 1],
      values_b64: btoa(String.fromCharCode(...bytes)), states_b64: btoa(String.fromCharCode(0, 3)) },
  }, [])).heatmap("r", "grad_norm", null, 10);
  assert.equal(hm.values[0], 0.5);
  assert.ok(Number.isNaN(hm.values[1]));
  assert.deepEqual(Array.from(hm.states), [0, 3]);
});

test("layer asks only for the metrics named (repeated metric=)", async () => {
  const log: string[] = [];
  const api = new Api(fakeFetch({
    layer: { run: "r", layer: "<loss>", type: "loss", steps: [5], metrics: { value: [1] }, states: [0], events: [] },
  }, log));
  await api.layer("r", "net.fc1 & co", { start: 5, end: 9 }, ["grad_norm", "act_std", "grad_norm"]);
  assert.equal(log[0], "./layer?run=r&layer=net.fc1+%26+co&start=5&end=9&metric=grad_norm&metric=act_std");
  await api.layer("r", "<loss>", null, ["value"]);
  assert.equal(log[1], "./layer?run=r&layer=%3Closs%3E&metric=value");
  // No metric would mean "all 17" to the server: refused before any request.
  await assert.rejects(api.layer("r", "<loss>", null, []));
  assert.equal(log.length, 2);
});

test("HTTP errors carry the status and the server's reason", async () => {
  const api = new Api(fakeFetch({}, []));
  await assert.rejects(api.meta("x"), (e: unknown) => e instanceof HttpError && e.status === 404 && /unknown run/.test(e.reason));
});

test("Latest drops superseded answers and aborts their requests", () => {
  const slot = new Latest();
  const a = slot.start();
  const b = slot.start();
  assert.ok(a.signal.aborted);
  assert.ok(!b.signal.aborted);
  assert.ok(!slot.isCurrent(a.token));
  assert.ok(slot.isCurrent(b.token));
  slot.cancel();
  assert.ok(!slot.isCurrent(b.token) && b.signal.aborted);
  assert.ok(isAbort(new DOMException("x", "AbortError")));
  assert.ok(!isAbort(new Error("x")));
});
