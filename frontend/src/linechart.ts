/**
 * Geometry of the small line chart in the layer detail: one series over
 * steps, log or linear y, broken into segments at missing values (NaN) and
 * non-finite values (drawn separately as markers).
 */

export interface ChartBox {
  left: number;
  top: number;
  width: number;
  height: number;
}

export interface ChartScale {
  x0: number;
  x1: number;
  /** y bounds in plotted space (log10 of |v| for log charts). */
  y0: number;
  y1: number;
  log: boolean;
}

function yOf(v: number, log: boolean): number {
  if (!Number.isFinite(v)) return NaN;
  if (!log) return v;
  const a = Math.abs(v);
  return a > 0 ? Math.log10(a) : NaN;
}

/** Bounds of the finite (and, for log, non-zero) points; padded when flat. */
export function chartScale(steps: readonly number[], values: ArrayLike<number>, log: boolean): ChartScale {
  let y0 = Infinity;
  let y1 = -Infinity;
  for (let i = 0; i < values.length; i++) {
    const y = yOf(values[i], log);
    if (Number.isNaN(y)) continue;
    if (y < y0) y0 = y;
    if (y > y1) y1 = y;
  }
  if (y0 > y1) [y0, y1] = [0, 1];
  if (y1 - y0 < 1e-9) {
    const pad = log ? 0.5 : Math.abs(y0) * 0.1 || 0.5;
    y0 -= pad;
    y1 += pad;
  }
  const x0 = steps.length ? steps[0] : 0;
  const x1 = steps.length ? steps[steps.length - 1] : 1;
  return { x0, x1: x1 > x0 ? x1 : x0 + 1, y0, y1, log };
}

export function xPixel(s: ChartScale, box: ChartBox, step: number): number {
  return box.left + ((step - s.x0) / (s.x1 - s.x0)) * box.width;
}

export function yPixel(s: ChartScale, box: ChartBox, v: number): number {
  const y = yOf(v, s.log);
  return box.top + box.height - ((y - s.y0) / (s.y1 - s.y0)) * box.height;
}

/** Polyline segments [x0, y0, x1, y1, ...]; a point without a value breaks the line. */
export function segments(steps: readonly number[], values: ArrayLike<number>, s: ChartScale, box: ChartBox): number[][] {
  const out: number[][] = [];
  let cur: number[] = [];
  for (let i = 0; i < steps.length; i++) {
    const y = yPixel(s, box, values[i]);
    if (Number.isNaN(y)) {
      if (cur.length) out.push(cur);
      cur = [];
      continue;
    }
    cur.push(xPixel(s, box, steps[i]), y);
  }
  if (cur.length) out.push(cur);
  return out;
}
