/**
 * Decoding of the plugin's JSON into typed, validated structures.
 *
 * TensorBoard's http_util.Respond writes non-finite floats as the strings
 * "NaN", "Infinity" and "-Infinity"; the server may also send null. Every
 * decoder here accepts those and checks the shape it relies on, so a broken
 * or hostile answer fails loudly in one place instead of drawing garbage.
 */
import { decodeNotes, holdSampled } from "./cells";
import type {
  EventList,
  Heatmap,
  LayerSeries,
  Meta,
  MetricRow,
  NdEvent,
  RunInfo,
  Severity,
  StateInfo,
  TableColors,
} from "./types";

/** A JSON float (number, "NaN", "Infinity", "-Infinity" or null) as a number. */
export function decodeFloat(v: unknown): number {
  if (typeof v === "number") return v;
  if (v === "Infinity") return Infinity;
  if (v === "-Infinity") return -Infinity;
  return NaN;
}

export class DecodeError extends Error {}

function fail(what: string): never {
  throw new DecodeError(`unexpected answer from the server: ${what}`);
}

function obj(v: unknown, what: string): Record<string, unknown> {
  if (typeof v !== "object" || v === null || Array.isArray(v)) fail(`${what} is not an object`);
  return v as Record<string, unknown>;
}

function arr(v: unknown, what: string): unknown[] {
  if (!Array.isArray(v)) fail(`${what} is not a list`);
  return v;
}

function str(v: unknown, what: string): string {
  if (typeof v !== "string") fail(`${what} is not a string`);
  return v;
}

function int(v: unknown, what: string): number {
  if (typeof v !== "number" || !Number.isInteger(v)) fail(`${what} is not an integer`);
  return v;
}

function severity(v: unknown): Severity {
  return v === "error" || v === "warning" ? v : "info";
}

export function decodeRuns(raw: unknown): RunInfo[] {
  return arr(obj(raw, "runs answer").runs, "runs").map((r, i) => {
    const o = obj(r, `runs[${i}]`);
    const rc = o.root_cause == null ? null : obj(o.root_cause, "root_cause");
    return {
      run: str(o.run, "run"),
      status: o.status === "failing" ? "failing" : "healthy",
      root_cause: rc && {
        kind: str(rc.kind, "root_cause.kind"),
        layer: str(rc.layer, "root_cause.layer"),
        step: int(rc.step, "root_cause.step"),
        message: typeof rc.message === "string" ? rc.message : "",
      },
      num_layers: int(o.num_layers ?? 0, "num_layers"),
      first_step: int(o.first_step ?? 0, "first_step"),
      last_step: int(o.last_step ?? 0, "last_step"),
      num_steps: int(o.num_steps ?? 0, "num_steps"),
      num_events: int(o.num_events ?? 0, "num_events"),
    };
  });
}

export function decodeMeta(raw: unknown): Meta {
  const o = obj(raw, "meta");
  return {
    run: str(o.run, "run"),
    layers: arr(o.layers, "layers").map((l, i) => {
      const lo = obj(l, `layers[${i}]`);
      return { name: str(lo.name, "layer name"), type: typeof lo.type === "string" ? lo.type : "" };
    }),
    metrics: arr(o.metrics, "metrics").map((m) => str(m, "metric")),
    states: decodeStateRows(o.states),
    metric_info: o.metric_info == null ? null : decodeMetricRows(o.metric_info),
    colors: o.colors == null ? {} : decodeColors(o.colors),
    first_step: int(o.first_step, "first_step"),
    last_step: int(o.last_step, "last_step"),
    num_steps: int(o.num_steps, "num_steps"),
  };
}

/**
 * A colour as the tab paints it ("#rrggbb"), else undefined: the palette
 * packs colours into pixels, so anything else would paint garbage (and a
 * fallback colour is better than refusing the whole answer).
 */
function hexColor(v: unknown): string | undefined {
  return typeof v === "string" && /^#[0-9a-fA-F]{6}$/.test(v) ? v : undefined;
}

function nullableStr(v: unknown, what: string): string | null | undefined {
  return v === undefined ? undefined : v === null ? null : str(v, what);
}

/** `meta.states`: code, name and severity always; the rest when the server sends it. */
export function decodeStateRows(raw: unknown): StateInfo[] {
  return arr(raw, "states").map((s) => {
    const so = obj(s, "state");
    const row: StateInfo = { code: int(so.code, "state code"), name: str(so.name, "state name"), severity: severity(so.severity) };
    if (so.rank !== undefined) row.rank = int(so.rank, "state rank");
    const kind = nullableStr(so.kind, "state kind");
    if (kind !== undefined) row.kind = kind;
    const evidence = nullableStr(so.evidence, "state evidence");
    if (evidence !== undefined) row.evidence = evidence;
    const color = hexColor(so.color);
    if (color !== undefined) row.color = color;
    if (typeof so.label === "string") row.label = so.label;
    return row;
  });
}

/** `meta.metric_info`. */
export function decodeMetricRows(raw: unknown): MetricRow[] {
  return arr(raw, "metric_info").map((m) => {
    const mo = obj(m, "metric_info row");
    const scale = mo.scale;
    if (scale !== "log" && scale !== "linear") fail(`metric scale ${JSON.stringify(scale)}`);
    return {
      name: str(mo.name, "metric name"),
      scale,
      label: str(mo.label, "metric label"),
      description: typeof mo.description === "string" ? mo.description : "",
    };
  });
}

/** `meta.colors`: only the valid colours it holds. */
export function decodeColors(raw: unknown): Partial<TableColors> {
  const o = obj(raw, "colors");
  const out: Partial<TableColors> = {};
  for (const key of ["no_data", "unknown_state"] as const) {
    const c = hexColor(o[key]);
    if (c !== undefined) out[key] = c;
  }
  return out;
}

/** Bytes of a base64 string (standard alphabet, padding optional). */
export function decodeBase64(b64: string): Uint8Array {
  const fromBase64 = (Uint8Array as unknown as { fromBase64?: (s: string) => Uint8Array }).fromBase64;
  if (typeof fromBase64 === "function") {
    try {
      return fromBase64(b64);
    } catch {
      fail("invalid base64");
    }
  }
  let bin: string;
  try {
    bin = atob(b64);
  } catch {
    fail("invalid base64");
  }
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/**
 * `n` little-endian float32 from base64 (NaN and +-Infinity are plain IEEE
 * values). A Float32Array view on the decoded bytes when the platform is
 * little-endian and the buffer aligned (a copy otherwise), else a DataView.
 */
export function decodeFloat32B64(b64: string, n: number, what = "values_b64"): Float32Array {
  let bytes = decodeBase64(b64);
  if (bytes.length !== n * 4) fail(`${what} holds ${bytes.length} bytes, expected ${n * 4}`);
  if (LITTLE_ENDIAN) {
    if (bytes.byteOffset % 4 !== 0) bytes = bytes.slice();
    return new Float32Array(bytes.buffer, bytes.byteOffset, n);
  }
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = dv.getFloat32(i * 4, true);
  return out;
}

/** `n` uint8 from base64. */
export function decodeUint8B64(b64: string, n: number, what = "states_b64"): Uint8Array {
  const bytes = decodeBase64(b64);
  if (bytes.length !== n) fail(`${what} holds ${bytes.length} bytes, expected ${n}`);
  return bytes;
}

/** A heatmap answer, `format=b64` (values_b64/states_b64) or JSON (values/states). */
export function decodeHeatmap(raw: unknown): Heatmap {
  const o = obj(raw, "heatmap");
  const rows = int(o.rows, "rows");
  const cols = int(o.cols, "cols");
  if (rows < 0 || cols < 0) fail("negative rows/cols");
  const n = rows * cols;
  const colStart = arr(o.col_start, "col_start").map((v) => int(v, "col_start"));
  const colEnd = arr(o.col_end, "col_end").map((v) => int(v, "col_end"));
  const layers = arr(o.layers, "layers").map((v) => str(v, "layer"));
  if (colStart.length !== cols || colEnd.length !== cols || layers.length !== rows) fail("axis sizes");
  let values: Float32Array;
  let states: Uint8Array;
  if (typeof o.values_b64 === "string" || typeof o.states_b64 === "string") {
    values = decodeFloat32B64(str(o.values_b64, "values_b64"), n);
    states = decodeUint8B64(str(o.states_b64, "states_b64"), n);
  } else {
    const vals = arr(o.values, "values");
    const sts = arr(o.states, "states");
    if (vals.length !== n || sts.length !== n) fail("values/states size != rows*cols");
    values = new Float32Array(n);
    states = new Uint8Array(n);
    for (let i = 0; i < n; i++) {
      values[i] = decodeFloat(vals[i]);
      const s = sts[i];
      states[i] = typeof s === "number" && s >= 0 && s <= 255 ? s : 255;
    }
  }
  const notes = decodeNotes(o, rows, cols);
  const held = holdSampled(values, states, rows, cols, notes.every, notes.skipped);
  return { run: str(o.run, "run"), metric: str(o.metric, "metric"), rows, cols, layers, colStart, colEnd, values, states, notes: { ...notes, held } };
}

export function decodeEvent(raw: unknown): NdEvent {
  const o = obj(raw, "event");
  return {
    step: int(o.step, "event step"),
    layer: str(o.layer, "event layer"),
    kind: str(o.kind, "event kind"),
    from_state: typeof o.from_state === "string" ? o.from_state : "",
    to_state: typeof o.to_state === "string" ? o.to_state : "",
    value: decodeFloat(o.value),
    severity: severity(o.severity),
    message: typeof o.message === "string" ? o.message : "",
  };
}

export function decodeEvents(raw: unknown): EventList {
  const o = obj(raw, "events answer");
  const events = arr(o.events, "events").map(decodeEvent);
  return {
    run: str(o.run, "run"),
    total: typeof o.total === "number" ? o.total : events.length,
    truncated: o.truncated === true,
    events,
  };
}

export function decodeLayer(raw: unknown): LayerSeries {
  const o = obj(raw, "layer");
  const steps = arr(o.steps, "steps").map((v) => int(v, "step"));
  const m = obj(o.metrics, "metrics");
  const metrics: Record<string, Float64Array> = {};
  for (const [name, series] of Object.entries(m)) {
    const a = arr(series, `metrics.${name}`);
    if (a.length !== steps.length) fail(`metrics.${name} length`);
    metrics[name] = Float64Array.from(a, decodeFloat);
  }
  const sts = arr(o.states, "states");
  if (sts.length !== steps.length) fail("states length");
  return {
    run: str(o.run, "run"),
    layer: str(o.layer, "layer"),
    type: typeof o.type === "string" ? o.type : "",
    steps,
    metrics,
    states: Uint8Array.from(sts, (s) => (typeof s === "number" && s >= 0 && s <= 255 ? s : 255)),
    events: arr(o.events ?? [], "events").map(decodeEvent),
  };
}
