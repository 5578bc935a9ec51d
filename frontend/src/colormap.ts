/**
 * Values and states -> colour indices (Uint8Array) -> a palette of CSS colours.
 *
 * Index layout of a palette (256 entries):
 *   0                       no data (not painted: the canvas background shows)
 *   1                       healthy, flat (the `state` metric)
 *   RAMP_START..+RAMP_SIZE  healthy cells by metric value, low -> high
 *   STATE_START + code      a failing state (code 1..MAX_STATE_CODE)
 * A failing state always wins over the value so one bad step stays visible.
 */
import { STATE_HEALTHY, STATE_NONFINITE, STATE_UNKNOWN, type StateTable } from "./states";

export const NO_DATA = 0;
export const HEALTHY_FLAT = 1;
export const RAMP_START = 2;
export const RAMP_SIZE = 32;
export const STATE_START = RAMP_START + RAMP_SIZE;
export const MAX_STATE_CODE = 255 - STATE_START;

// Sequential blues (light = small, dark = large); healthy data stays calm so
// the warm/vivid state colours stand out.
const RAMP_STOPS = ["#e4eef8", "#bcd6ec", "#86b5dc", "#4d8cc6", "#1f5c9e"];

export type ScaleKind = "log" | "linear" | "state";

/** A value -> [0, 1] mapping; for log scales lo/hi are log10 bounds. */
export interface Scale {
  kind: ScaleKind;
  lo: number;
  hi: number;
}

/** Cells sampled (evenly) to place the log scale: enough for stable percentiles. */
const SCALE_SAMPLE = 50000;
/** The ramp spans these percentiles of the healthy values: one outlier must not flatten it. */
const SCALE_QUANTILES: [number, number] = [0.02, 0.98];

/**
 * The colour scale of a set of heatmaps, placed on the HEALTHY, finite values
 * only (failing cells have their own colours) between robust percentiles, so
 * neither a failing layer nor one outlier washes out the ramp; values beyond
 * clamp to its ends. Several runs share one scale to compare.
 */
export function computeScale(kind: ScaleKind, parts: { values: Float32Array; states: Uint8Array }[]): Scale {
  if (kind !== "log") return { kind, lo: 0, hi: 1 };
  let total = 0;
  for (const p of parts) total += p.values.length;
  const stride = Math.max(1, Math.ceil(total / SCALE_SAMPLE));
  const logs: number[] = [];
  for (const { values, states } of parts) {
    // Compare IEEE bits: cheap rejection of zero, inf and NaN on every cell.
    const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
    for (let i = 0; i < bits.length; i += stride) {
      const s = states[i];
      if (s !== STATE_HEALTHY && s !== STATE_UNKNOWN) continue;
      const a = bits[i] & 0x7fffffff;
      if (a === 0 || a >= 0x7f800000) continue;
      logs.push(Math.log10(Math.abs(values[i])));
    }
  }
  if (logs.length === 0) return { kind, lo: -1, hi: 1 };
  logs.sort((a, b) => a - b);
  const at = (q: number) => logs[Math.round(q * (logs.length - 1))];
  const lo = at(SCALE_QUANTILES[0]);
  const hi = at(SCALE_QUANTILES[1]);
  if (hi - lo < 1e-6) return { kind, lo: lo - 0.5, hi: hi + 0.5 };
  return { kind, lo, hi };
}

/** Position of a finite value on the scale, clamped to [0, 1]. */
export function scalePosition(scale: Scale, v: number): number {
  let t: number;
  if (scale.kind === "log") {
    const a = Math.abs(v);
    t = a > 0 ? (Math.log10(a) - scale.lo) / (scale.hi - scale.lo) : 0;
  } else {
    t = (v - scale.lo) / (scale.hi - scale.lo);
  }
  return t < 0 ? 0 : t > 1 ? 1 : t;
}

/** The value at a position of the scale (inverse of scalePosition), for legend ticks. */
export function scaleValue(scale: Scale, t: number): number {
  const x = scale.lo + t * (scale.hi - scale.lo);
  return scale.kind === "log" ? 10 ** x : x;
}

/** Colour index of one cell. */
export function cellColor(scale: Scale, value: number, state: number): number {
  if (state !== STATE_HEALTHY && state !== STATE_UNKNOWN) {
    return STATE_START + (state <= MAX_STATE_CODE ? state : MAX_STATE_CODE);
  }
  if (scale.kind === "state") return state === STATE_HEALTHY ? HEALTHY_FLAT : NO_DATA;
  if (Number.isNaN(value)) return NO_DATA;
  if (!Number.isFinite(value)) return STATE_START + STATE_NONFINITE; // a non-finite value in a "healthy" bin
  return RAMP_START + Math.round(scalePosition(scale, value) * (RAMP_SIZE - 1));
}

/** Ramp bucket (0..RAMP_SIZE-1) of a finite value: same rounding as cellColor. */
function rampBucket(scale: Scale, bounds: Float64Array, v: number): number {
  const x = scale.kind === "log" ? Math.abs(v) : v;
  let lo = 0;
  let hi = RAMP_SIZE - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (x >= bounds[mid]) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

const AMBIGUOUS = 255;
const KEY_SHIFT = 15; // 8 exponent + 8 mantissa bits of |v| -> 65,536 keys

/**
 * Colour indices of a whole matrix, one byte per cell; the same result as
 * cellColor for every cell (unit tested), but fast enough for millions of
 * cells: a 64K-entry table indexed by the top bits of |v| gives the ramp
 * bucket directly; only keys whose value interval straddles a bucket boundary
 * (a few dozen) fall back to a binary search.
 */
export function colorIndices(scale: Scale, values: Float32Array, states: Uint8Array, out?: Uint8Array): Uint8Array {
  const idx = out && out.length === values.length ? out : new Uint8Array(values.length);
  if (scale.kind === "state") {
    for (let i = 0; i < values.length; i++) idx[i] = cellColor(scale, values[i], states[i]);
    return idx;
  }
  // bounds[k]: the smallest x (|v| for log) that rounds to bucket k + 1.
  const bounds = new Float64Array(RAMP_SIZE - 1);
  for (let k = 0; k < RAMP_SIZE - 1; k++) bounds[k] = scaleValue(scale, (k + 0.5) / (RAMP_SIZE - 1));
  const lut = bucketTable(scale, bounds);
  const signed = scale.kind !== "log"; // linear: negative values clamp to bucket 0
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  for (let i = 0; i < values.length; i++) {
    const s = states[i];
    const b = bits[i];
    if (s !== STATE_HEALTHY && s !== STATE_UNKNOWN) {
      idx[i] = STATE_START + (s <= MAX_STATE_CODE ? s : MAX_STATE_CODE);
      continue;
    }
    let k = lut[(b & 0x7fffffff) >>> KEY_SHIFT];
    if (k === AMBIGUOUS || (signed && b >>> 31 === 1)) {
      idx[i] = cellColor(scale, values[i], s); // NaN, inf, negative linear, boundary keys
      continue;
    }
    idx[i] = RAMP_START + k;
  }
  return idx;
}

/** key -> ramp bucket of every |v| with those top bits, or AMBIGUOUS. */
function bucketTable(scale: Scale, bounds: Float64Array): Uint8Array {
  const n = 1 << (32 - 1 - KEY_SHIFT);
  const lut = new Uint8Array(n);
  const u = new Uint32Array(2);
  const f = new Float32Array(u.buffer);
  for (let key = 0; key < n; key++) {
    u[0] = key << KEY_SHIFT;
    u[1] = ((key + 1) << KEY_SHIFT) - 1;
    if (u[1] >= 0x7f800000 || u[0] === 0) {
      lut[key] = AMBIGUOUS; // inf/NaN, and zero / denormals (cellColor handles them)
      continue;
    }
    const a = rampBucket(scale, bounds, f[0]);
    lut[key] = a === rampBucket(scale, bounds, f[1]) ? a : AMBIGUOUS;
  }
  return lut;
}

function hexToRgb(h: string): [number, number, number] {
  const n = parseInt(h.slice(1), 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
}

/** The ramp colour at t in [0, 1] (linear interpolation between RAMP_STOPS). */
export function rampColor(t: number): string {
  const x = Math.min(1, Math.max(0, t)) * (RAMP_STOPS.length - 1);
  const i = Math.min(RAMP_STOPS.length - 2, Math.floor(x));
  const f = x - i;
  const a = hexToRgb(RAMP_STOPS[i]);
  const b = hexToRgb(RAMP_STOPS[i + 1]);
  const c = a.map((v, k) => Math.round(v + (b[k] - v) * f));
  return `#${c.map((v) => v.toString(16).padStart(2, "0")).join("")}`;
}

/** A palette packed as 32-bit RGBA pixels (ImageData byte order on little-endian hosts). */
export function packPalette(palette: readonly string[]): Uint32Array {
  const out = new Uint32Array(palette.length);
  for (let i = 0; i < palette.length; i++) {
    if (i === NO_DATA) continue; // transparent: the canvas background shows
    const [r, g, b] = hexToRgb(palette[i]);
    out[i] = ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;
  }
  return out;
}

/** The 256-entry palette of a state table (tables.ts: the server's, or the built-in one). */
export function buildPalette(table: StateTable): string[] {
  const p = new Array<string>(256).fill(table.colors.unknown_state);
  p[NO_DATA] = table.colors.no_data;
  p[HEALTHY_FLAT] = table.healthyColor();
  for (let i = 0; i < RAMP_SIZE; i++) p[RAMP_START + i] = rampColor(i / (RAMP_SIZE - 1));
  for (const s of table.states) {
    if (s.code > STATE_HEALTHY && s.code <= MAX_STATE_CODE) p[STATE_START + s.code] = s.color;
  }
  return p;
}
