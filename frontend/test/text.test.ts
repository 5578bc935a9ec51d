import { test } from "node:test";
import assert from "node:assert/strict";
import { formatSteps, formatValue, humanize, niceTicks } from "../src/format";
import { tooltipLines } from "../src/tooltip";
import { runSummary, shortLayer } from "../src/views/controls";
import { BUILTIN_TABLES } from "../src/tables";
import { detailSeriesOrder, pickSeries, seriesChoices, seriesLabel, seriesWithData } from "../src/views/detail";

const METRICS = BUILTIN_TABLES.metrics;
const metricInfo = (id: string) => METRICS.info(id);

test("formatValue is compact and honest about non-finite values", () => {
  assert.equal(formatValue(0.012345), "0.0123");
  assert.equal(formatValue(3e-5), "3e-5");
  assert.equal(formatValue(1234567), "1.23e6");
  assert.equal(formatValue(12), "12");
  assert.equal(formatValue(0), "0");
  assert.equal(formatValue(NaN), "no data");
  assert.equal(formatValue(Infinity), "+inf");
  assert.equal(formatValue(-Infinity), "-inf");
});

test("steps, kinds and ticks", () => {
  assert.equal(formatSteps(4, 4), "step 4");
  assert.equal(formatSteps(4, 9), "steps 4–9");
  assert.equal(humanize("vanishing_gradient"), "Vanishing gradient");
  assert.deepEqual(niceTicks(0, 100, 5), [0, 20, 40, 60, 80, 100]);
  const t = niceTicks(3, 997, 4);
  assert.ok(t.length >= 3 && t.length <= 6 && t.every((x) => x >= 3 && x <= 997));
});

test("tooltip names layer, steps, value and state", () => {
  const lines = tooltipLines({
    layer: "fc3", type: "Linear", first: 40, last: 59, value: 3.2e-5, state: "vanishing gradient",
    metric: metricInfo("grad_norm"), events: 1,
  });
  assert.deepEqual(lines, ["fc3 (Linear)", "steps 40–59", "Gradient norm (first vanishing gradient step): 3.2e-5", "state: vanishing gradient", "1 event starts here"]);
  const healthyBin = tooltipLines({ layer: "<loss>", type: "", first: 0, last: 9, value: 2.3, state: "healthy", metric: metricInfo("act_std"), events: 0 });
  assert.deepEqual(healthyBin, ["<loss>", "steps 0–9", "Activation std (extreme of bin): 2.3", "state: healthy"]);
  const st = tooltipLines({ layer: "x", type: "", first: 1, last: 1, value: 3, state: "non-finite", metric: metricInfo("state"), events: 2 });
  assert.deepEqual(st, ["x", "step 1", "state: non-finite", "2 events start here"]);
});

test("layer detail opens on a series that has data", () => {
  const s = {
    run: "r", layer: "relu1", type: "ReLU", steps: [0, 1], states: new Uint8Array([0, 0]), events: [],
    metrics: { grad_norm: new Float64Array([NaN, NaN]), act_std: new Float64Array([0.5, NaN]), value: new Float64Array([NaN, 2]), weight_norm: new Float64Array([NaN, NaN]) },
  };
  assert.deepEqual(seriesWithData(s), ["act_std", "value"]);
  assert.equal(pickSeries(s, "grad_norm"), "act_std");
  assert.equal(pickSeries(s, "value"), "value");
  assert.equal(pickSeries(s, "state"), "act_std");
});

test("series names of pseudo-layers", () => {
  assert.equal(seriesLabel("optimizer", "value", METRICS), "Learning rate");
  assert.equal(seriesLabel("loss", "value", METRICS), "Loss");
  assert.equal(seriesLabel("Linear", "grad_norm", METRICS), "Gradient norm");
  // Labels come from the metric table (the server's when it sends one).
  assert.equal(seriesLabel("Linear", "weight_norm", METRICS), "Weight norm");
  assert.equal(seriesLabel("Linear", "brand_new_metric", METRICS), "brand new metric");
});

test("the layer detail asks for the shown series only, with fallbacks in order", () => {
  const all = ["grad_norm", "grad_nonfinite", "grad_missing", "weight_norm", "update_ratio", "act_mean", "act_std",
    "act_absmax", "act_zero_frac", "act_dead_frac", "act_sat_frac", "act_nonfinite", "in_zero_frac", "in_dead_frac",
    "in_nonfinite", "value", "scale"];
  assert.deepEqual(seriesChoices("loss", all), ["value"]);
  assert.deepEqual(seriesChoices("optimizer", all), ["value", "scale"]);
  const mod = seriesChoices("Linear", all);
  assert.equal(mod.length, 15);
  assert.deepEqual(mod.slice(0, 5), ["grad_norm", "update_ratio", "act_std", "act_dead_frac", "act_sat_frac"]);
  assert.ok(!mod.includes("value") && !mod.includes("scale") && !mod.includes("state"));
  assert.deepEqual(detailSeriesOrder("Linear", "update_ratio", all).slice(0, 3), ["update_ratio", "grad_norm", "act_std"]);
  assert.deepEqual(detailSeriesOrder("ReLU", "grad_norm", all).slice(0, 2), ["grad_norm", "act_std"]);
  assert.deepEqual(detailSeriesOrder("Linear", "state", all).slice(0, 2), ["grad_norm", "act_std"]);
  assert.deepEqual(detailSeriesOrder("input", "state", all)[0], "act_std");
  assert.deepEqual(detailSeriesOrder("loss", "grad_norm", all), ["value"]);
  assert.deepEqual(detailSeriesOrder("optimizer", "state", all), ["value", "scale"]);
});

test("a collapsed group's tooltip says how many layers it holds and which one it shows", () => {
  const lines = tooltipLines({
    layer: "blocks.13", type: "", first: 40, last: 59, value: 3e5, state: "exploding gradient",
    metric: metricInfo("grad_norm"), events: 2, rows: 9, source: "blocks.13.fc1",
  });
  assert.deepEqual(lines, ["blocks.13 · worst of 9 layers", "steps 40–59", "Gradient norm (first exploding gradient step): 3e5",
    "state: exploding gradient", "from blocks.13.fc1", "2 events start here"]);
  const healthy = tooltipLines({ layer: "blocks", type: "", first: 3, last: 3, value: 0.5, state: "healthy", metric: metricInfo("act_std"), events: 0, rows: 90, source: "blocks.1.ln" });
  assert.equal(healthy[2], "Activation std (extreme of group): 0.5");
});

test("the run list's line: status and root cause, the layer cut at the start", () => {
  const run = { run: "r", status: "failing" as const, num_layers: 9, first_step: 0, last_step: 99, num_steps: 100, num_events: 3,
    root_cause: { kind: "exploding_gradient", layer: "blocks.37.mlp.fc1", step: 40, message: "" } };
  assert.deepEqual(runSummary(run), { text: "Exploding gradient · …37.mlp.fc1 @ 40", full: "Exploding gradient in blocks.37.mlp.fc1 from step 40", tone: "failing" });
  assert.equal(runSummary({ ...run, status: "healthy" }).tone, "warning");
  assert.deepEqual(runSummary({ ...run, status: "healthy", root_cause: null }), { text: "healthy · 100 steps", full: "healthy · 100 steps", tone: "healthy" });
  assert.equal(runSummary({ ...run, root_cause: null }).text, "failing, no single root cause");
  // the run list names an <optimizer> cause as the banner does, not by the symptom's kind
  const lr = { ...run, root_cause: { kind: "exploding_gradient", layer: "<optimizer>", step: 100, message: "The learning rate of param group 0 rose from 0.02 to 2 at step 100." } };
  assert.equal(runSummary(lr).text, "Learning rate too high · <optimizer> @ 100");
  assert.equal(shortLayer("fc3"), "fc3");
  assert.equal(shortLayer("<optimizer>"), "<optimizer>");
  assert.equal(shortLayer("encoder.layers.11.self_attn"), "…11.self_attn");
  assert.equal(shortLayer("a_very_long_module_name_indeed"), "…_name_indeed");
});
