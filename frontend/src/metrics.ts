/**
 * The table of metrics the tab draws with: id -> label, scale, description.
 *
 * Labels and scales are the server's (`meta.metric_info`, i.e.
 * format/metadata.py's METRIC_TABLE; tables.ts chooses it or the built-in
 * copy); which metrics the toolbar offers, and in what order, is the tab's
 * own choice (METRIC_MENU).
 */
import type { ScaleKind } from "./colormap";
import { plainLabel } from "./states";
import type { MetricRow } from "./types";

/** The pseudo-metric that draws states only (not a column on disk). */
export const STATE_METRIC = "state";

export interface MetricInfo {
  id: string;
  label: string;
  kind: ScaleKind;
  description: string;
}

/** The metrics offered in the toolbar's selector, in menu order. */
export const METRIC_MENU: readonly string[] = [
  "grad_norm", "update_ratio", "act_std", "act_dead_frac", "act_sat_frac", "fwd_gain", "bwd_gain", "unit_spread", STATE_METRIC,
];

const STATE_INFO: MetricInfo = { id: STATE_METRIC, label: "State only", kind: "state", description: "the worst state of each cell" };

export class MetricTable {
  private readonly byName = new Map<string, MetricInfo>();

  constructor(readonly rows: readonly MetricRow[]) {
    for (const m of rows) this.byName.set(m.name, { id: m.name, label: m.label, kind: m.scale, description: m.description });
  }

  /** Info for any metric id; one the table lacks is drawn on a log scale. */
  info(id: string): MetricInfo {
    if (id === STATE_METRIC) return STATE_INFO;
    return this.byName.get(id) ?? { id, label: plainLabel(id), kind: "log", description: "" };
  }

  /** The toolbar's entries (METRIC_MENU), labelled by this table. */
  menu(): MetricInfo[] {
    return METRIC_MENU.map((id) => this.info(id));
  }
}
