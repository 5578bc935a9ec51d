/**
 * The table of states the tab draws with: code -> name, colour, label.
 *
 * Its rows are the server's (`meta.states`, i.e. format/metadata.py's
 * STATE_TABLE), completed from the built-in copy where an older server left
 * fields out (tables.ts chooses). A code the table does not name still gets a
 * colour of its own (colors.unknown_state) instead of silently reusing
 * another state's.
 */
import type { Severity, TableColors } from "./types";

export const STATE_HEALTHY = 0;
/** A non-finite value is drawn in this state's colour even in a "healthy" bin (colormap.ts). */
export const STATE_NONFINITE = 3;
export const STATE_UNKNOWN = 255;
export const NO_DATA_LABEL = "no data";

/** A complete row of the state table. */
export interface StateRow {
  code: number;
  name: string;
  severity: Severity;
  rank: number;
  kind: string | null;
  evidence: string | null;
  /** "#rrggbb" */
  color: string;
  label: string;
}

/** The label of a state nobody labelled: its name with spaces. */
export function plainLabel(name: string): string {
  return name.replace(/_/g, " ");
}

const SEVERITY_ORDER: Readonly<Record<Severity, number>> = { error: 0, warning: 1, info: 2 };

export class StateTable {
  private readonly byCode = new Map<number, StateRow>();
  private readonly byName = new Map<string, StateRow>();
  private rankCache: Int16Array | null = null;

  constructor(readonly states: readonly StateRow[], readonly colors: TableColors) {
    for (const s of states) {
      this.byCode.set(s.code, s);
      this.byName.set(s.name, s);
    }
  }

  get(code: number): StateRow | undefined {
    return this.byCode.get(code);
  }

  /** Display name of a state code ("no data" for 255, "state N" for a code the table lacks). */
  name(code: number): string {
    if (code === STATE_UNKNOWN) return NO_DATA_LABEL;
    return this.byCode.get(code)?.label ?? `state ${code}`;
  }

  /** Colour of a state code (no data and unknown codes included). */
  color(code: number): string {
    if (code === STATE_UNKNOWN) return this.colors.no_data;
    return this.byCode.get(code)?.color ?? this.colors.unknown_state;
  }

  /** Colour of a state by name (an event's `to_state`). */
  colorOf(name: string): string {
    return this.byName.get(name)?.color ?? this.colors.unknown_state;
  }

  /** The flat colour of healthy cells (the `state` metric, the legend). */
  healthyColor(): string {
    return this.color(STATE_HEALTHY);
  }

  /**
   * Rank of every uint8 code (higher is worse; -1 for no data and for codes
   * the table lacks), as the server ranks them to bin (server/heatmap.py).
   */
  ranks(): Int16Array {
    if (!this.rankCache) {
      this.rankCache = new Int16Array(256).fill(-1);
      for (const s of this.states) if (s.code >= 0 && s.code < STATE_UNKNOWN) this.rankCache[s.code] = s.rank;
    }
    return this.rankCache;
  }

  /** Failing states (all but healthy), worst severity first, for the legend. */
  failing(): StateRow[] {
    return this.states
      .filter((s) => s.code !== STATE_HEALTHY && s.code !== STATE_UNKNOWN)
      .sort((a, b) => SEVERITY_ORDER[a.severity] - SEVERITY_ORDER[b.severity] || a.code - b.code);
  }
}
