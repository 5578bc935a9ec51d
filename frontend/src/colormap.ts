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
  // |v| of the sample: its quantiles are those of log10|v| (a monotonic map),
  // so two logarithms instead of one per sample, and a selection, not a sort.
  const sample = new Float64Array(Math.ceil(total / stride) + parts.length);
  let count = 0;
  for (const { values, states } of parts) {
    // Compare IEEE bits: cheap rejection of zero, inf and NaN on every cell.
    const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
    for (let i = 0; i < bits.length; i += stride) {
      const s = states[i];
      if (s !== STATE_HEALTHY && s !== STATE_UNKNOWN) continue;
      const a = bits[i] & 0x7fffffff;
      if (a === 0 || a >= 0x7f800000) continue;
      sample[count++] = Math.abs(values[i]);
    }
  }
  if (count === 0) return { kind, lo: -1, hi: 1 };
  const k0 = Math.round(SCALE_QUANTILES[0] * (count - 1));
  const k1 = Math.round(SCALE_QUANTILES[1] * (count - 1));
  const lo = Math.log10(selectKth(sample, 0, count - 1, k0));
  // Everything right of k0 is now >= the k0-th: the k1-th is among them.
  const hi = Math.log10(selectKth(sample, k0, count - 1, k1));
  if (hi - lo < 1e-6) return { kind, lo: lo - 0.5, hi: hi + 0.5 };
  return { kind, lo, hi };
}

/**
 * The k-th smallest of a[lo..hi] (k in that range), moving elements of the
 * range so that the left of k holds smaller ones and the right larger ones
 * (Hoare's selection with a median-of-three pivot; no NaN in the range).
 */
export function selectKth(a: Float64Array, lo: number, hi: number, k: number): number {
  while (lo < hi) {
    const x = a[lo];
    const y = a[(lo + hi) >> 1];
    const z = a[hi];
    const pivot = x < y ? (y < z ? y : x < z ? z : x) : x < z ? x : y < z ? z : y;
    let i = lo;
    let j = hi;
    while (i <= j) {
      while (a[i] < pivot) i++;
      while (a[j] > pivot) j--;
      if (i <= j) {
        const t = a[i];
        a[i] = a[j];
        a[j] = t;
        i++;
        j--;
      }
    }
    if (k <= j) hi = j;
    else if (k >= i) lo = i;
    else return a[k];
  }
  return a[k];
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

const KEY_SHIFT = 15; // sign, 8 exponent and 8 mantissa bits of v -> 131,072 keys
/** A table entry for "ask cellColor" (0 is no colour index the ramp gives). */
const FALLBACK = 0;

// Colour index of each state code when it wins over the value (0: it does not).
const STATE_INDEX = Uint8Array.from({ length: 256 }, (_, s) =>
  s === STATE_HEALTHY || s === STATE_UNKNOWN ? 0 : STATE_START + (s <= MAX_STATE_CODE ? s : MAX_STATE_CODE),
);

/**
 * Colour indices of a whole matrix, one byte per cell; the same result as
 * cellColor for every cell (unit tested), but fast enough for millions of
 * cells: a table indexed by the top bits of v gives the colour directly;
 * only keys whose value interval straddles a bucket boundary (a few dozen),
 * zero, infinities and NaN fall back to cellColor.
 */
export function colorIndices(scale: Scale, values: Float32Array, states: Uint8Array, out?: Uint8Array): Uint8Array {
  const idx = out && out.length === values.length ? out : new Uint8Array(values.length);
  if (scale.kind === "state") {
    for (let i = 0; i < values.length; i++) idx[i] = cellColor(scale, values[i], states[i]);
    return idx;
  }
  const lut = colorTable(scale);
  const n = values.length;
  const bits = new Uint32Array(values.buffer, values.byteOffset, n);
  // Most cells are healthy: four state bytes at a time, and a word of four
  // healthy ones goes straight to the table (twice as fast as cell by cell).
  let i = Math.min(n, (4 - (states.byteOffset & 3)) & 3);
  for (let j = 0; j < i; j++) idx[j] = colorOne(scale, lut, bits, values, states, j);
  const aligned = ((states.byteOffset + i) & 3) === 0;
  const words = aligned ? new Uint32Array(states.buffer, states.byteOffset + i, (n - i) >> 2) : new Uint32Array(0);
  for (let w = 0; w < words.length; w++, i += 4) {
    if (words[w] !== 0) {
      for (let j = i; j < i + 4; j++) idx[j] = colorOne(scale, lut, bits, values, states, j);
      continue;
    }
    for (let j = i; j < i + 4; j++) {
      const k = lut[bits[j] >>> KEY_SHIFT];
      idx[j] = k !== FALLBACK ? k : cellColor(scale, values[j], STATE_HEALTHY);
    }
  }
  for (; i < n; i++) idx[i] = colorOne(scale, lut, bits, values, states, i);
  return idx;
}

/** One cell of colorIndices (`bits`: the IEEE bits of `values`). */
function colorOne(scale: Scale, lut: Uint8Array, bits: Uint32Array, values: Float32Array, states: Uint8Array, j: number): number {
  const si = STATE_INDEX[states[j]];
  if (si !== 0) return si;
  const k = lut[bits[j] >>> KEY_SHIFT];
  return k !== FALLBACK ? k : cellColor(scale, values[j], states[j]);
}

// The last few tables built (one per scale): colouring a matrix row by row,
// or again after a change of rows, must not rebuild the table each time.
const tables: { kind: ScaleKind; lo: number; hi: number; lut: Uint8Array }[] = [];
const TABLES_KEPT = 4;

/** key (top bits of v) -> colour index of every v with those bits, or FALLBACK. */
function colorTable(scale: Scale): Uint8Array {
  const hit = tables.find((t) => t.kind === scale.kind && t.lo === scale.lo && t.hi === scale.hi);
  if (hit) return hit.lut;
  // bounds[k]: the smallest x (|v| for log) that rounds to bucket k + 1.
  const bounds = new Float64Array(RAMP_SIZE - 1);
  for (let k = 0; k < RAMP_SIZE - 1; k++) bounds[k] = scaleValue(scale, (k + 0.5) / (RAMP_SIZE - 1));
  const half = 1 << (31 - KEY_SHIFT);
  const lut = new Uint8Array(2 * half);
  const u = new Uint32Array(2);
  const f = new Float32Array(u.buffer);
  // Keys of non-negative values grow with v (IEEE bits are ordered): the
  // buckets of a key's lowest and highest value are found by two pointers
  // that only move forward (the bucket of x is the number of bounds <= x,
  // the rounding of cellColor).
  let a = 0;
  let b = 0;
  for (let key = 0; key < half; key++) {
    u[0] = key << KEY_SHIFT;
    u[1] = ((key + 1) << KEY_SHIFT) - 1;
    if (u[1] >= 0x7f800000 || u[0] === 0) continue; // inf/NaN, and zero / denormals: FALLBACK
    while (a < RAMP_SIZE - 1 && bounds[a] <= f[0]) a++;
    if (b < a) b = a;
    while (b < RAMP_SIZE - 1 && bounds[b] <= f[1]) b++;
    if (a === b) lut[key] = RAMP_START + a;
  }
  // Negative values: on a log scale by their magnitude; on a linear one
  // below the ramp (its first colour). Zero, infinity and NaN: FALLBACK.
  for (let key = 1; key < half; key++) {
    if (lut[key] === FALLBACK && scale.kind === "log") continue;
    lut[half + key] = scale.kind === "log" ? lut[key] : (key << KEY_SHIFT) >= 0x7f800000 ? FALLBACK : RAMP_START;
  }
  tables.unshift({ kind: scale.kind, lo: scale.lo, hi: scale.hi, lut });
  tables.length = Math.min(tables.length, TABLES_KEPT);
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
