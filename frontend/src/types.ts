/**
 * The JSON shapes of the plugin routes (docs/API.md), after decoding.
 *
 * Raw answers may carry the strings "NaN", "Infinity", "-Infinity" where a
 * float is expected; api.ts turns them into numbers before anything else
 * sees them, so every float below is a plain (possibly non-finite) number.
 */

export type Severity = "info" | "warning" | "error";

export interface RootCause {
  kind: string;
  layer: string;
  step: number;
  message: string;
}

export interface RunInfo {
  run: string;
  status: "healthy" | "failing";
  root_cause: RootCause | null;
  num_layers: number;
  first_step: number;
  last_step: number;
  num_steps: number;
  num_events: number;
}

export interface LayerInfo {
  name: string;
  type: string;
}

/**
 * A row of the server's state table (`meta.states`). A server older than
 * the table sends only code, name and severity: the other fields are then
 * undefined, and tables.ts fills them from the built-in copy.
 */
export interface StateInfo {
  code: number;
  name: string;
  severity: Severity;
  rank?: number;
  /** Event kind of a layer entering the state (null: healthy). */
  kind?: string | null;
  /** Metric whose value the state's events report. */
  evidence?: string | null;
  /** "#rrggbb" */
  color?: string;
  label?: string;
}

export type MetricScale = "log" | "linear";

/** A row of the server's metric table (`meta.metric_info`). */
export interface MetricRow {
  name: string;
  scale: MetricScale;
  label: string;
  description: string;
}

/** Colours that belong to no state row (`meta.colors`). */
export interface TableColors {
  /** Cells without data (state code 255). */
  no_data: string;
  /** A state code the table does not name (a newer writer). */
  unknown_state: string;
}

export interface Meta {
  run: string;
  layers: LayerInfo[];
  metrics: string[];
  states: StateInfo[];
  /** null: the server sent no metric table. */
  metric_info: MetricRow[] | null;
  /** The colours the server sent (none from an older server). */
  colors: Partial<TableColors>;
  first_step: number;
  last_step: number;
  num_steps: number;
}

/** A binned layer x step matrix; values/states are row-major [rows * cols]. */
export interface Heatmap {
  run: string;
  metric: string;
  rows: number;
  cols: number;
  layers: string[];
  colStart: number[];
  colEnd: number[];
  values: Float32Array;
  states: Uint8Array;
  /** What blank and held cells mean (cells.ts); absent from an older server's answers. */
  notes?: CellNotes;
}

export interface NdEvent {
  step: number;
  layer: string;
  kind: string;
  from_state: string;
  to_state: string;
  value: number;
  severity: Severity;
  message: string;
}

export interface EventList {
  run: string;
  total: number;
  truncated: boolean;
  events: NdEvent[];
}

export interface LayerSeries {
  run: string;
  layer: string;
  type: string;
  steps: number[];
  metrics: Record<string, Float64Array>;
  states: Uint8Array;
  events: NdEvent[];
}

/** An inclusive range of training steps. */
export interface StepRange {
  start: number;
  end: number;
}

/** What a heatmap's cells mean beyond the binned matrix (docs/API.md, *Cell notes*; cells.ts). */
export interface CellNotes {
  /** Per column: steps of the bin a GradScaler skipped (null: the run has no scaler). */
  skipped: Int32Array | null;
  /** Per row: 1 = the metric at every step, N > 1 = sampled every N steps, 0 = never. */
  every: Int32Array | null;
  /** Per row: why it has none of the metric ("no parameters", "pseudo-layer", ...), else null. */
  empty: (string | null)[] | null;
  /** Per cell: 1 where the value is held from an earlier sample. */
  held: Uint8Array | null;
}
