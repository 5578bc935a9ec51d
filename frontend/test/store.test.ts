import { test } from "node:test";
import assert from "node:assert/strict";
import { Api, HttpError } from "../src/api";
import builtinJson from "../src/builtin_tables.json";
import { decodeMeta } from "../src/decode";
import { clipToRun, layerRange, LAYER_MAX_POINTS, Store } from "../src/store";
import { BUILTIN_TABLES } from "../src/tables";

/** One request seen by the fake server; `answer` settles it (until then it is in flight). */
interface Pending {
  url: string;
  route: string;
  params: URLSearchParams;
  answered: boolean;
  answer(body: unknown, status?: number): void;
}

/**
 * A fake plugin backend that answers only when the test says so, so the
 * order of answers is the test's. Aborted requests reject like fetch does
 * (unless `ignoreAbort`: an answer already on its way when the abort came).
 */
function backend(ignoreAbort = false) {
  const seen: Pending[] = [];
  const fetcher = (url: string, init?: { signal?: AbortSignal }) =>
    new Promise<Response>((resolve, reject) => {
      const u = new URL(url, "http://tb/data/plugin/neuraldbg/");
      const abort = () => reject(new DOMException("aborted", "AbortError"));
      if (!ignoreAbort) {
        if (init?.signal?.aborted) return abort();
        init?.signal?.addEventListener("abort", abort);
      }
      const p: Pending = {
        url, route: u.pathname.split("/").pop()!, params: u.searchParams, answered: false,
        answer: (body, status = 200) => {
          p.answered = true;
          resolve(new Response(typeof body === "string" ? body : JSON.stringify(body), { status }));
        },
      };
      seen.push(p);
    });
  /** The requests not answered yet of a route, oldest first. */
  const waiting = (route: string) => seen.filter((p) => p.route === route && !p.answered);
  return { seen, waiting, store: new Store(new Api(fetcher)) };
}

const META = {
  run: "r", layers: [{ name: "fc1", type: "Linear" }, { name: "relu", type: "ReLU" }], metrics: ["grad_norm", "act_std", "weight_norm"],
  states: builtinJson.states, metric_info: builtinJson.metric_info, colors: builtinJson.colors, first_step: 10, last_step: 59, num_steps: 50,
};
const EVENTS = { run: "r", total: 0, truncated: false, events: [] };

function heatmapAnswer(metric: string, cols = 2) {
  return {
    run: "r", metric, rows: 2, cols, layers: ["fc1", "relu"], col_start: Array.from({ length: cols }, (_, i) => 10 + i),
    col_end: Array.from({ length: cols }, (_, i) => 10 + i), values: new Array(2 * cols).fill(0.5), states: new Array(2 * cols).fill(0),
  };
}

/** Settle microtasks and the fake's answers (Response.json is async). */
const settle = () => new Promise((r) => setTimeout(r, 0));

async function loaded(b: ReturnType<typeof backend>) {
  const p = b.store.loadRun("r");
  await settle();
  b.waiting("meta")[0].answer(META);
  b.waiting("events")[0].answer(EVENTS);
  assert.equal((await p)?.run, "r");
}

test("loads use relative urls and fill the cache; tables are the run's server's", async () => {
  const b = backend();
  assert.equal(b.store.tables("r"), BUILTIN_TABLES);
  const runs = b.store.loadRuns();
  await settle();
  b.waiting("runs")[0].answer({ runs: [{ run: "r", status: "healthy", root_cause: null, num_layers: 2, first_step: 10, last_step: 59, num_steps: 50, num_events: 0 }] });
  assert.equal((await runs)?.length, 1);
  assert.equal(b.store.runInfo("r")?.status, "healthy");
  assert.equal(b.store.runInfo(null), undefined);
  await loaded(b);
  assert.deepEqual(b.seen.map((p) => p.url), ["./runs", "./meta?run=r", "./events?run=r&limit=1000"]);
  assert.equal(b.store.meta("r")?.num_steps, 50);
  assert.equal(b.store.events("r")?.total, 0);
  assert.notEqual(b.store.tables("r"), BUILTIN_TABLES);
  assert.equal(b.store.tables("r"), b.store.tables("r"));
  assert.equal(b.store.tables("r").states.healthyColor(), "#c9dcef");
});

test("the same heatmap asked again under the same meta is a cache hit; a reload misses", async () => {
  const b = backend();
  await loaded(b);
  const first = b.store.loadHeatmap("r", "grad_norm", { start: 0, end: 30 }, 300.6);
  await settle();
  const asked = b.waiting("heatmap");
  assert.equal(asked.length, 1);
  // The range is clipped to the run's steps before it is asked (and before the cache key).
  assert.equal(asked[0].params.get("start"), "10");
  assert.equal(asked[0].params.get("end"), "30");
  asked[0].answer(heatmapAnswer("grad_norm"));
  const hm = await first;
  assert.equal(hm?.metric, "grad_norm");
  assert.equal(b.store.heatmap("r"), hm);

  assert.equal(await b.store.loadHeatmap("r", "grad_norm", { start: 5, end: 30 }, 300), hm);
  assert.equal(b.waiting("heatmap").length, 0, "a hit asks nothing");

  const other = b.store.loadHeatmap("r", "act_std", { start: 5, end: 30 }, 300);
  await settle();
  assert.equal(b.waiting("heatmap").length, 1, "another metric is asked");
  b.waiting("heatmap")[0].answer(heatmapAnswer("act_std"));
  assert.equal((await other)?.metric, "act_std");

  await loaded(b); // a reload: new meta, so the old answers are not reused
  const again = b.store.loadHeatmap("r", "act_std", { start: 5, end: 30 }, 300);
  await settle();
  assert.equal(b.waiting("heatmap").length, 1);
  b.waiting("heatmap")[0].answer(heatmapAnswer("act_std", 3));
  assert.equal((await again)?.cols, 3);
});

test("a range the run does not reach answers an empty heatmap without asking", async () => {
  const b = backend();
  assert.equal(await b.store.loadHeatmap("r", "grad_norm", null, 100), null, "no meta yet: nothing to ask");
  await loaded(b);
  const hm = await b.store.loadHeatmap("r", "grad_norm", { start: 100, end: 200 }, 300);
  assert.equal(hm?.cols, 0);
  assert.deepEqual(hm?.layers, ["fc1", "relu"]);
  assert.equal(b.waiting("heatmap").length, 0);
  assert.equal(clipToRun({ start: 0, end: 5 }, b.store.meta("r")!), "none");
  assert.equal(clipToRun(null, b.store.meta("r")!), null);
});

test("a superseded answer is dropped: it resolves null and never reaches the cache", async () => {
  const b = backend();
  await loaded(b);
  const slow = b.store.loadHeatmap("r", "grad_norm", null, 300);
  await settle();
  const fast = b.store.loadHeatmap("r", "grad_norm", { start: 20, end: 30 }, 300);
  await settle();
  const [old, current] = b.waiting("heatmap");
  current.answer(heatmapAnswer("grad_norm", 1));
  old.answer(heatmapAnswer("grad_norm", 7)); // too late: its request was aborted
  assert.equal(await slow, null);
  assert.equal((await fast)?.cols, 1);
  assert.equal(b.store.heatmap("r")?.cols, 1);
});

test("an answer that comes after its request was superseded is dropped all the same", async () => {
  const b = backend(true);
  await loaded(b);
  const a = b.store.loadHeatmap("r", "grad_norm", null, 300);
  const c = b.store.loadHeatmap("r", "act_std", null, 300);
  const d = b.store.loadHeatmap("r", "weight_norm", null, 300);
  await settle();
  const [ra, rc, rd] = b.waiting("heatmap");
  rd.answer(heatmapAnswer("weight_norm"));
  ra.answer(heatmapAnswer("grad_norm"));
  rc.answer("boom", 500);
  assert.equal(await a, null);
  assert.equal(await c, null, "a superseded request's error is not shown");
  assert.equal((await d)?.metric, "weight_norm");
  assert.equal(b.store.heatmap("r")?.metric, "weight_norm");
});

test("a superseded request's error is dropped too; a current one's is thrown", async () => {
  const b = backend();
  await loaded(b);
  const a = b.store.loadHeatmap("r", "grad_norm", null, 300);
  await settle();
  const c = b.store.loadHeatmap("r", "act_std", null, 300);
  await settle();
  const [first, second] = b.waiting("heatmap");
  first.answer("boom", 500);
  second.answer("unknown metric", 400);
  assert.equal(await a, null);
  await assert.rejects(c, (e: unknown) => e instanceof HttpError && e.status === 400 && /unknown metric/.test(e.reason));
  assert.equal(b.store.heatmap("r"), undefined);

  const runs = b.store.loadRuns();
  await settle();
  b.waiting("runs")[0].answer("boom", 500);
  await assert.rejects(runs, (e: unknown) => e instanceof HttpError && e.status === 500);
  // A run whose meta fails: rejected, nothing cached.
  const bad = b.store.loadRun("gone");
  await settle();
  b.waiting("meta")[0].answer("unknown run", 404);
  await assert.rejects(bad, (e: unknown) => e instanceof HttpError && e.status === 404);
  assert.equal(b.store.meta("gone"), undefined);
  // A malformed answer is an error too (decode.ts), not a drawing of garbage.
  const garbled = b.store.loadHeatmap("r", "grad_norm", { start: 11, end: 12 }, 300);
  await settle();
  b.waiting("heatmap")[0].answer({ run: "r" });
  await assert.rejects(garbled, /unexpected answer/);
});

test("the layer detail asks its fallbacks one at a time, merged; closing it drops its answers", async () => {
  const b = backend();
  await loaded(b);
  const range = { start: 10, end: 11 };
  const layer = (metric: string, values: unknown[]) => ({
    run: "r", layer: "relu", type: "ReLU", steps: [10, 11], metrics: { [metric]: values }, states: [0, 0], events: [],
  });
  const p = b.store.loadLayer("r", "relu", range, ["grad_norm", "act_std", "weight_norm"]);
  await settle();
  b.waiting("layer")[0].answer(layer("grad_norm", ["NaN", "NaN"])); // a ReLU has no gradient norm
  await settle();
  assert.deepEqual(b.waiting("layer")[0].params.getAll("metric"), ["act_std"]);
  b.waiting("layer")[0].answer(layer("act_std", [0.5, 0.6]));
  const s = await p;
  assert.deepEqual(Object.keys(s!.metrics).sort(), ["act_std", "grad_norm"]);
  assert.equal(b.waiting("layer").length, 0, "stops at the first series with data");

  const more = b.store.loadSeries("r", "relu", range, "weight_norm");
  await settle();
  b.store.cancelLayer();
  b.waiting("layer")[0].answer(layer("weight_norm", [1, 1]));
  assert.equal(await more, null);

  // Opening another layer drops the series still on its way for the old one.
  const series = b.store.loadSeries("r", "relu", range, "weight_norm");
  const next = b.store.loadLayer("r", "fc1", range, ["grad_norm"]);
  await settle();
  assert.equal(await series, null);
  b.waiting("layer").find((p) => p.params.get("layer") === "fc1")!.answer({ ...layer("grad_norm", [1, 2]), layer: "fc1" });
  assert.equal((await next)?.layer, "fc1");
});

test("layer detail steps: the shown ones within the run, at most the route's limit", () => {
  const meta = decodeMeta({ ...META, first_step: 0, last_step: 500000, num_steps: 500001 });
  assert.deepEqual(layerRange(meta, { start: -5, end: 99 }, 50), { start: 0, end: 99 });
  assert.deepEqual(layerRange({ ...meta, last_step: 99 }, null, 50), { start: 0, end: 99 });
  const r = layerRange(meta, null, 250000);
  assert.equal(r.end - r.start + 1, LAYER_MAX_POINTS);
  assert.ok(r.start <= 250000 && 250000 <= r.end);
});
