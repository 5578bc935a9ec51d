// A tiny stand-in for the plugin backend that follows docs/API.md, for
// developing and testing the frontend without TensorBoard. Serves:
//   /                      a page that imports ./index.js and calls render()
//                          (what TensorBoard's plugin_entry.html does)
//   /index.js              the built bundle (tb_neuraldbg/static/index.js)
//   /runs, /meta, /heatmap, /events, /layer, /report   mock data
// Usage: node mock_server.mjs [port]   (prints "listening <port>")
// Scenario switches via the query of "/": ?mode=empty | error | stale (a
// heatmap of the whole run, i.e. without start=, answers 900 ms late, to test
// that superseded answers are dropped) | tables (meta sends tables of states
// and metrics, with colours and labels unlike the built-in ones, which the tab
// must draw with; in the other modes meta has the shape of an older server,
// without tables, and the tab falls back to its built-in copy).
import http from "node:http";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const bundle = path.resolve(here, "..", "..", "tb_neuraldbg", "static", "index.js");

const STATES = ["healthy", "vanishing", "exploding", "nonfinite", "no_gradient", "dead", "saturated", "collapsed",
  "act_exploding", "frozen", "data_anomaly", "loss_spike", "loss_plateau", "scaler_collapse", "initial_loss"];
const SEV = { healthy: "info", exploding: "error", nonfinite: "error", no_gradient: "error", act_exploding: "error",
  data_anomaly: "error", scaler_collapse: "error" };
/** ?mode=tables: what meta sends (docs/API.md "GET meta"), unlike the built-in tables. */
const SERVER_TABLES = {
  states: STATES.map((name, code) => ({ code, name, severity: SEV[name] ?? "warning", rank: code, kind: null, evidence: null,
    color: `#${(0x102030 + code * 0x0a0b0c).toString(16).padStart(6, "0")}`, label: `server ${name}` })),
  metric_info: [{ name: "grad_norm", scale: "linear", label: "Server gradient norm", description: "from the server" }],
  colors: { no_data: "#fafaf0", unknown_state: "#00ffee" },
};
const METRICS = ["grad_norm", "grad_nonfinite", "grad_missing", "weight_norm", "update_ratio", "act_mean", "act_std",
  "act_absmax", "act_zero_frac", "act_dead_frac", "act_sat_frac", "act_nonfinite", "in_zero_frac", "in_dead_frac",
  "in_nonfinite", "value", "scale"];

function makeRun(name, nMods, nSteps, plant) {
  const layers = [{ name: "<input>", type: "input" }];
  for (let i = 0; i < nMods; i++) layers.push({ name: `net.fc${i}`, type: i % 2 ? "ReLU" : "Linear" });
  layers.push({ name: "<loss>", type: "loss" }, { name: "<optimizer>", type: "optimizer" });
  const L = layers.length;
  let seed = name.length * 7919;
  const rand = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  const stats = {}; // metric -> Float64Array [S*L]
  for (const m of METRICS) stats[m] = new Float64Array(nSteps * L).fill(NaN);
  const states = new Uint8Array(nSteps * L);
  for (let s = 0; s < nSteps; s++) {
    for (let l = 0; l < L; l++) {
      const i = s * L + l;
      const t = layers[l].type;
      if (t === "loss") { stats.value[i] = 2.3 * Math.exp(-s / 200) + 0.05 * rand(); continue; }
      if (t === "optimizer") { stats.value[i] = 1e-3; continue; }
      stats.act_std[i] = 0.5 + 0.5 * rand();
      if (t === "input") continue;
      stats.grad_norm[i] = 1e-2 * (0.5 + rand()) * (1 + l / 4);
      stats.update_ratio[i] = 1e-3 * (0.5 + rand());
      stats.act_dead_frac[i] = 0.05 * rand();
      stats.act_sat_frac[i] = 0;
    }
  }
  const events = [];
  if (plant) {
    for (const p of plant) {
      const l = layers.findIndex((x) => x.name === p.layer);
      for (let s = p.step; s < nSteps; s++) {
        states[s * L + l] = STATES.indexOf(p.state);
        stats.grad_norm[s * L + l] = p.value;
      }
      events.push({ step: p.step, layer: p.layer, kind: p.kind, from_state: "healthy", to_state: p.state, value: p.value,
        severity: SEV[p.state] ?? "warning", message: p.message });
    }
  }
  events.sort((a, b) => a.step - b.step);
  const rc = events.length ? { kind: events[0].kind, layer: events[0].layer, step: events[0].step, message: events[0].message } : null;
  return { name, layers, nSteps, stats, states, events, rc };
}

const RUNS = [
  makeRun("vanishing_sigmoid", 8, 300, [
    { step: 47, layer: "net.fc5", state: "vanishing", kind: "vanishing_gradient", value: 3e-6,
      message: "Gradients into net.fc5 fell from 1.2e-2 to 3e-6. <b>Try</b> ReLU/GELU instead of sigmoid, or residual connections." },
    { step: 60, layer: "net.fc3", state: "vanishing", kind: "vanishing_gradient", value: 1e-6, message: "spread upstream" },
  ]),
  makeRun("healthy_mlp", 8, 300, null),
];

function rank(code) {
  return [0, 40, 60, 100, 50, 45, 42, 41, 55, 30, 90, 35, 34, 80, 33][code] ?? -1;
}

function bin(run, metric, start, end, maxCols) {
  const L = run.layers.length;
  const steps = [];
  for (let s = start; s <= end; s++) steps.push(s);
  const C = Math.max(1, Math.min(maxCols, steps.length));
  const colStart = [], colEnd = [];
  for (let c = 0; c < C; c++) {
    colStart.push(steps[Math.floor((c * steps.length) / C)]);
    colEnd.push(steps[Math.floor(((c + 1) * steps.length) / C) - 1]);
  }
  const values = [], states = [];
  for (let l = 0; l < L; l++) {
    for (let c = 0; c < C; c++) {
      let worst = 255, wv = NaN, ext = NaN;
      for (let s = colStart[c]; s <= colEnd[c]; s++) {
        const code = run.states[s * L + l];
        const v = metric === "state" ? code : run.stats[metric][s * L + l];
        if (rank(code) > rank(worst)) { worst = code; wv = v; }
        if (Number.isFinite(v) && (Number.isNaN(ext) || Math.abs(Math.log10(Math.abs(v) || 1e-30)) > Math.abs(Math.log10(Math.abs(ext) || 1e-30)))) ext = v;
      }
      states.push(worst);
      values.push(worst !== 0 && worst !== 255 ? wv : ext);
    }
  }
  return { run: run.name, metric, rows: L, cols: C, layers: run.layers.map((x) => x.name), col_start: colStart, col_end: colEnd, values, states };
}

const enc = (v) => (typeof v === "number" && !Number.isFinite(v) ? (Number.isNaN(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity") : v);
function json(res, obj, delay = 0) {
  const body = JSON.stringify(obj, (k, v) => (Array.isArray(v) ? v.map(enc) : enc(v)));
  setTimeout(() => { res.writeHead(200, { "content-type": "application/json" }); res.end(body); }, delay);
}

let mode = "normal";
const server = http.createServer((req, res) => {
  const u = new URL(req.url, "http://x");
  const q = u.searchParams;
  const run = RUNS.find((r) => r.name === q.get("run"));
  const route = u.pathname.slice(1);
  if (route === "") {
    mode = q.get("mode") ?? "normal";
    res.writeHead(200, { "content-type": "text/html" });
    res.end('<!doctype html><html><head><meta charset="utf-8"></head><body><script type="module">import("./index.js").then((m) => m.render());</script></body></html>');
    return;
  }
  if (route === "index.js") {
    res.writeHead(200, { "content-type": "text/javascript" });
    res.end(readFileSync(bundle));
    return;
  }
  if (mode === "error") { res.writeHead(500, { "content-type": "text/plain" }); res.end("boom"); return; }
  if (route === "runs") {
    const runs = mode === "empty" ? [] : RUNS.map((r) => ({ run: r.name, status: r.rc ? "failing" : "healthy", root_cause: r.rc,
      num_layers: r.layers.length, first_step: 0, last_step: r.nSteps - 1, num_steps: r.nSteps, num_events: r.events.length }));
    return json(res, { runs });
  }
  if (!run) { res.writeHead(404, { "content-type": "text/plain" }); res.end("unknown run"); return; }
  const start = q.has("start") ? +q.get("start") : 0;
  const end = q.has("end") ? +q.get("end") : run.nSteps - 1;
  if (route === "meta") {
    const tables = mode === "tables" ? SERVER_TABLES
      : { states: STATES.map((name, code) => ({ code, name, severity: SEV[name] ?? "warning" })) };
    return json(res, { run: run.name, layers: run.layers, metrics: METRICS, ...tables,
      first_step: 0, last_step: run.nSteps - 1, num_steps: run.nSteps });
  }
  if (route === "heatmap") {
    const delay = mode === "stale" && !q.has("start") ? 900 : 20;
    const hm = bin(run, q.get("metric"), start, end, +(q.get("max_cols") ?? 1000));
    if (q.get("format") === "b64") {
      // docs/API.md: little-endian float32 and uint8, base64, instead of values/states.
      const { values, states, ...rest } = hm;
      const f = Buffer.alloc(values.length * 4);
      values.forEach((v, i) => f.writeFloatLE(v, i * 4));
      return json(res, { ...rest, values_b64: f.toString("base64"), states_b64: Buffer.from(states).toString("base64") }, delay);
    }
    return json(res, hm, delay);
  }
  if (route === "events") return json(res, { run: run.name, total: run.events.length, truncated: false, events: run.events });
  if (route === "layer") {
    const l = run.layers.findIndex((x) => x.name === q.get("layer"));
    if (l < 0) { res.writeHead(404); res.end("unknown layer"); return; }
    const L = run.layers.length;
    const steps = [];
    for (let s = start; s <= end; s++) steps.push(s);
    const asked = q.getAll("metric");
    const bad = asked.find((m) => !METRICS.includes(m));
    if (bad) { res.writeHead(400, { "content-type": "text/plain" }); res.end(`unknown metric ${bad}`); return; }
    const metrics = Object.fromEntries((asked.length ? [...new Set(asked)] : METRICS).map((m) => [m, steps.map((s) => run.stats[m][s * L + l])]));
    return json(res, { run: run.name, layer: run.layers[l].name, type: run.layers[l].type, steps, metrics,
      states: steps.map((s) => run.states[s * L + l]), events: run.events.filter((e) => e.layer === run.layers[l].name) });
  }
  res.writeHead(404); res.end("no such route");
});
server.listen(+(process.argv[2] ?? 0), "127.0.0.1", () => console.log(`listening ${server.address().port}`));
