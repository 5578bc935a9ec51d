/**
 * Which tables of states and metrics the tab draws with.
 *
 * The server's, from `meta` (docs/API.md "GET meta"); the built-in copy
 * (builtin_tables.json, held equal to the server's by
 * tests/test_frontend_tables.py) only where a server does not send them:
 * a state row without colour or label takes the built-in row of that NAME
 * (codes may differ between versions; names do not), a missing metric table
 * or colour the built-in one.
 */
import builtinJson from "./builtin_tables.json";
import { decodeColors, decodeMetricRows, decodeStateRows } from "./decode";
import { MetricTable } from "./metrics";
import { plainLabel, StateTable, STATE_HEALTHY, STATE_NONFINITE, type StateRow } from "./states";
import type { Meta, MetricRow, StateInfo, TableColors } from "./types";

export interface Tables {
  states: StateTable;
  metrics: MetricTable;
}

/** Complete rows: each field from `s` if sent, else from `fallback`, else a plain default. */
function completeRow(s: StateInfo, fallback: StateRow | undefined, colors: TableColors): StateRow {
  return {
    code: s.code,
    name: s.name,
    severity: s.severity,
    rank: s.rank ?? fallback?.rank ?? 0,
    kind: s.kind !== undefined ? s.kind : (fallback?.kind ?? null),
    evidence: s.evidence !== undefined ? s.evidence : (fallback?.evidence ?? null),
    color: s.color ?? fallback?.color ?? colors.unknown_state,
    label: s.label ?? fallback?.label ?? plainLabel(s.name),
  };
}

function builtinTables(): { states: StateRow[]; metrics: MetricRow[]; colors: TableColors } {
  const colors = decodeColors(builtinJson.colors);
  if (!colors.no_data || !colors.unknown_state) throw new Error("builtin_tables.json: colors");
  const full = { no_data: colors.no_data, unknown_state: colors.unknown_state };
  const states = decodeStateRows(builtinJson.states).map((s) => {
    if (s.color === undefined || s.label === undefined) throw new Error(`builtin_tables.json: state ${s.name}`);
    return completeRow(s, undefined, full);
  });
  return { states, metrics: decodeMetricRows(builtinJson.metric_info), colors: full };
}

const BUILTIN = builtinTables();
const BUILTIN_STATE = new Map(BUILTIN.states.map((s) => [s.name, s]));

/** The built-in tables: what the tab draws with before (or without) a server's. */
export const BUILTIN_TABLES: Tables = {
  states: new StateTable(BUILTIN.states, BUILTIN.colors),
  metrics: new MetricTable(BUILTIN.metrics),
};

/** The tables to draw a run with (the built-in ones when there is no meta yet). */
export function tablesFor(meta: Meta | undefined): Tables {
  if (!meta) return BUILTIN_TABLES;
  const colors: TableColors = { ...BUILTIN.colors, ...meta.colors };
  const sent = meta.states.length > 0 ? meta.states : BUILTIN.states;
  const rows = sent.map((s) => completeRow(s, BUILTIN_STATE.get(s.name), colors));
  // The codes the tab itself relies on (colormap.ts) always have a row.
  for (const code of [STATE_NONFINITE, STATE_HEALTHY]) {
    if (!rows.some((s) => s.code === code)) rows.unshift(BUILTIN_TABLES.states.get(code)!);
  }
  const sentMetrics = meta.metric_info ?? [];
  // Metrics the server's table lacks (an older server) keep their built-in rows.
  const metrics = [...sentMetrics, ...BUILTIN.metrics.filter((m) => !sentMetrics.some((x) => x.name === m.name))];
  return { states: new StateTable(rows, colors), metrics: new MetricTable(metrics) };
}
