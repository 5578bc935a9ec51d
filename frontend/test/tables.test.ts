import { test } from "node:test";
import assert from "node:assert/strict";
import builtinJson from "../src/builtin_tables.json";
import { buildPalette, STATE_START } from "../src/colormap";
import { decodeMeta } from "../src/decode";
import { METRIC_MENU } from "../src/metrics";
import { BUILTIN_TABLES, tablesFor } from "../src/tables";

/** A /meta answer with these tables (docs/API.md); fields left out are left out of the answer. */
function meta(tables: { states?: unknown; metric_info?: unknown; colors?: unknown }) {
  return decodeMeta({
    run: "r", layers: [{ name: "fc", type: "Linear" }], metrics: ["grad_norm"], first_step: 0, last_step: 9, num_steps: 10,
    states: builtinJson.states, ...tables,
  });
}

/** The state rows of an older server: code, name and severity only. */
const OLD_STATES = builtinJson.states.map(({ code, name, severity }) => ({ code, name, severity }));

test("the built-in tables are builtin_tables.json (which tests/test_frontend_tables.py holds equal to /meta)", () => {
  assert.deepEqual(BUILTIN_TABLES.states.states, builtinJson.states);
  assert.deepEqual(BUILTIN_TABLES.metrics.rows, builtinJson.metric_info);
  assert.deepEqual(BUILTIN_TABLES.states.colors, builtinJson.colors);
  assert.equal(tablesFor(undefined), BUILTIN_TABLES);
  // One colour per state, the healthy one of the table (the HTML export and the tab agree).
  assert.equal(BUILTIN_TABLES.states.healthyColor(), "#c9dcef");
  assert.equal(BUILTIN_TABLES.states.colors.no_data, "#f3f4f6");
});

test("a server's tables win over the built-in ones", () => {
  const states = builtinJson.states.map((s) => (s.name === "vanishing" ? { ...s, color: "#123456", label: "fading" } : s));
  const metric_info = builtinJson.metric_info.map((m) => (m.name === "grad_norm" ? { ...m, label: "∇ norm", scale: "linear" } : m));
  const t = tablesFor(meta({ states, metric_info, colors: { no_data: "#eeeeee", unknown_state: "#00ff00" } }));
  assert.equal(t.states.color(1), "#123456");
  assert.equal(t.states.colorOf("vanishing"), "#123456");
  assert.equal(t.states.name(1), "fading");
  assert.equal(t.states.color(255), "#eeeeee");
  assert.equal(t.states.color(42), "#00ff00");
  assert.deepEqual(t.metrics.info("grad_norm"), { id: "grad_norm", label: "∇ norm", kind: "linear", description: builtinJson.metric_info[0].description });
  const p = buildPalette(t.states);
  assert.equal(p[STATE_START + 1], "#123456");
  assert.equal(p[0], "#eeeeee");
});

test("the toolbar keeps its choice and order of metrics, labelled by the table", () => {
  const metric_info = builtinJson.metric_info.map((m) => ({ ...m, label: m.label.toUpperCase() }));
  const menu = tablesFor(meta({ metric_info })).metrics.menu();
  assert.deepEqual(menu.map((m) => m.id), [...METRIC_MENU]);
  assert.deepEqual(METRIC_MENU, [
    "grad_norm", "update_ratio", "act_std", "act_dead_frac", "act_sat_frac", "fwd_gain", "bwd_gain", "unit_spread", "state",
  ]);
  assert.equal(menu[0].label, "GRADIENT NORM");
  assert.deepEqual(menu[menu.length - 1], { id: "state", label: "State only", kind: "state", description: "the worst state of each cell" });
  assert.deepEqual(
    BUILTIN_TABLES.metrics.menu().map((m) => [m.label, m.kind]),
    [["Gradient norm", "log"], ["Update ratio ‖Δw‖/‖w‖", "log"], ["Activation std", "log"], ["Dead fraction", "linear"],
      ["Saturated fraction", "linear"], ["Forward gain", "log"], ["Backward gain", "log"], ["Unit spread", "log"],
      ["State only", "state"]],
  );
});

test("an older server: colours and labels from the built-in rows of the same name, unknown names plainly", () => {
  // Codes may differ between versions; names do not.
  const states = [
    { code: 0, name: "healthy", severity: "info" },
    { code: 5, name: "vanishing", severity: "warning" },
    { code: 3, name: "nonfinite", severity: "error" },
    { code: 99, name: "brand_new", severity: "error" },
  ];
  const m = meta({ states });
  assert.equal(m.metric_info, null);
  assert.deepEqual(m.colors, {});
  const t = tablesFor(m);
  assert.equal(t.states.color(5), BUILTIN_TABLES.states.colorOf("vanishing"));
  assert.equal(t.states.name(5), "vanishing gradient");
  assert.equal(t.states.get(5)?.kind, "vanishing_gradient");
  assert.equal(t.states.name(99), "brand new");
  assert.equal(t.states.color(99), builtinJson.colors.unknown_state);
  assert.equal(t.states.name(0), "healthy");
  assert.equal(t.states.name(255), "no data");
  assert.equal(t.states.name(42), "state 42");
  assert.deepEqual(t.states.failing().map((s) => s.code), [3, 99, 5]);
  assert.equal(t.states.color(255), builtinJson.colors.no_data);
  assert.equal(t.metrics.info("act_dead_frac").kind, "linear");
  assert.equal(t.metrics.info("grad_nonfinite").kind, "linear");
  assert.equal(t.metrics.info("weight_norm").label, "Weight norm");
  assert.deepEqual(t.metrics.info("not_a_metric"), { id: "not_a_metric", label: "not a metric", kind: "log", description: "" });
  // The whole built-in state table for an answer with the old shape.
  assert.deepEqual(tablesFor(meta({ states: OLD_STATES })).states.states, BUILTIN_TABLES.states.states);
});

test("the rows the tab relies on are always there; a bad colour falls back instead of painting garbage", () => {
  const t = tablesFor(meta({ states: [{ code: 1, name: "vanishing", severity: "warning", color: "red; x: url(evil)" }] }));
  assert.equal(t.states.color(1), BUILTIN_TABLES.states.color(1));
  assert.equal(t.states.healthyColor(), "#c9dcef");
  assert.equal(buildPalette(t.states)[STATE_START + 3], BUILTIN_TABLES.states.color(3));
  const bad = tablesFor(meta({ colors: { no_data: "url(x)", unknown_state: "#abcdef" } }));
  assert.equal(bad.states.colors.no_data, builtinJson.colors.no_data);
  assert.equal(bad.states.colors.unknown_state, "#abcdef");
  // Metrics the server's table lacks keep their built-in rows.
  const partial = tablesFor(meta({ metric_info: [{ name: "grad_norm", scale: "log", label: "G", description: "" }] }));
  assert.equal(partial.metrics.info("grad_norm").label, "G");
  assert.equal(partial.metrics.info("act_std").label, "Activation std");
  assert.throws(() => meta({ metric_info: [{ name: "grad_norm", scale: "cubic", label: "G" }] }), /metric scale/);
});
