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
  assert.equal(log[0], "./heatmap?run=a+b%2Fc&metric=grad_norm&start=5&end=9&max_cols=5000");
  await api.heatmap("a b/c", "grad_norm", null, 300);
  assert.equal(log[1], "./heatmap?run=a+b%2Fc&metric=grad_norm&max_cols=300");
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
