/**
 * The one table of state colours and labels.
 *
 * State codes and names come from the server (`meta.states`, i.e.
 * tb_neuraldbg/metadata.py); colours are keyed by NAME so a code added on the
 * server later still gets a sensible colour (UNKNOWN_STATE_COLOR) instead of
 * silently reusing another state's. Colours are chosen to be distinct from
 * each other and from the blue healthy ramp (colormap.ts).
 */
import type { StateInfo } from "./types";

export const STATE_HEALTHY = 0;
export const STATE_UNKNOWN = 255;

export const STATE_COLORS: Readonly<Record<string, string>> = {
  nonfinite: "#d62728", // red: the worst
  data_anomaly: "#e8178a", // pink
  scaler_collapse: "#7b1fa2", // deep purple
  exploding: "#ff7f0e", // orange
  act_exploding: "#f2c200", // yellow
  no_gradient: "#3b3b3b", // charcoal: a hole in the gradient flow
  dead: "#8c564b", // brown
  saturated: "#c45cc4", // orchid
  collapsed: "#b5892f", // ochre
  vanishing: "#9b8cff", // lavender
  frozen: "#2ca089", // teal green
  loss_spike: "#f08a7e", // salmon
  loss_plateau: "#9ccf6b", // light green
  initial_loss: "#c7a6e0", // light purple
};
export const UNKNOWN_STATE_COLOR = "#ff00ff";

/** Short human labels; fall back to the name with spaces. */
export const STATE_LABELS: Readonly<Record<string, string>> = {
  nonfinite: "non-finite (NaN/inf)",
  data_anomaly: "data anomaly",
  scaler_collapse: "AMP scaler collapse",
  exploding: "exploding gradient",
  act_exploding: "exploding activation",
  no_gradient: "no gradient",
  dead: "dead activations",
  saturated: "saturated activations",
  collapsed: "collapsed activations",
  vanishing: "vanishing gradient",
  frozen: "frozen weights",
  loss_spike: "loss spike",
  loss_plateau: "loss plateau",
  initial_loss: "bad initial loss",
};

export function stateColor(name: string): string {
  return STATE_COLORS[name] ?? UNKNOWN_STATE_COLOR;
}

export function stateLabel(name: string): string {
  return STATE_LABELS[name] ?? name.replace(/_/g, " ");
}

/** code -> StateInfo lookup built from meta.states. */
export class StateTable {
  private readonly byCode = new Map<number, StateInfo>();

  constructor(readonly states: readonly StateInfo[]) {
    for (const s of states) this.byCode.set(s.code, s);
  }

  get(code: number): StateInfo | undefined {
    return this.byCode.get(code);
  }

  /** Display name of a state code ("no data" for 255 or unknown codes). */
  name(code: number): string {
    if (code === STATE_UNKNOWN) return "no data";
    const s = this.byCode.get(code);
    return s ? (s.code === STATE_HEALTHY ? "healthy" : stateLabel(s.name)) : `state ${code}`;
  }

  /** Failing states (all but healthy), worst severity first, for the legend. */
  failing(): StateInfo[] {
    const rank = { error: 0, warning: 1, info: 2 };
    return this.states
      .filter((s) => s.code !== STATE_HEALTHY && s.code !== STATE_UNKNOWN)
      .sort((a, b) => rank[a.severity] - rank[b.severity] || a.code - b.code);
  }
}
