/**
 * Heatmap geometry: cell edges in device pixels, hit testing, step lookup.
 *
 * Edges are precomputed once per size change (the paint loop then only reads
 * arrays) and rounded to whole device pixels so neighbouring cells share an
 * edge: no hairline gaps and no double-painted seams.
 */

export const ROW_MAX = 20;
export const ROW_MIN = 2;
/** Rows at least this tall get a text label next to them. */
export const LABEL_MIN_ROW = 11;

export interface Layout {
  rows: number;
  cols: number;
  dpr: number;
  widthCss: number;
  heightCss: number;
  rowHeightCss: number;
  /** cols + 1 column edges, device px. */
  xEdges: Int32Array;
  /** rows + 1 row edges, device px. */
  yEdges: Int32Array;
}

/** Row height (css px) that fits `rows` into `availableCss`, within [ROW_MIN, ROW_MAX]. */
export function rowHeightFor(rows: number, availableCss: number): number {
  if (rows <= 0) return ROW_MAX;
  return Math.max(ROW_MIN, Math.min(ROW_MAX, Math.floor(availableCss / rows)));
}

export function computeLayout(widthCss: number, rows: number, cols: number, rowHeightCss: number, dpr: number): Layout {
  const w = Math.max(1, Math.round(widthCss * dpr));
  const xEdges = new Int32Array(cols + 1);
  for (let c = 0; c <= cols; c++) xEdges[c] = Math.round((c * w) / Math.max(1, cols));
  const yEdges = new Int32Array(rows + 1);
  for (let r = 0; r <= rows; r++) yEdges[r] = Math.round(r * rowHeightCss * dpr);
  return { rows, cols, dpr, widthCss, heightCss: rows * rowHeightCss, rowHeightCss, xEdges, yEdges };
}

/** The largest i with edges[i] <= v (edges ascending), clamped to [0, n-1]. */
function bucketOf(edges: Int32Array, v: number): number {
  let lo = 0;
  let hi = edges.length - 2;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (edges[mid] <= v) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/** The cell under a css-pixel point of the canvas, or null outside. */
export function cellAt(layout: Layout, xCss: number, yCss: number): { row: number; col: number } | null {
  if (layout.rows === 0 || layout.cols === 0) return null;
  if (xCss < 0 || yCss < 0 || xCss >= layout.widthCss || yCss >= layout.heightCss) return null;
  // Columns placed on a shared step axis (stepaxis.ts) may not fill the width.
  const xd = xCss * layout.dpr;
  const { xEdges } = layout;
  if (xd < xEdges[0] || (xd >= xEdges[layout.cols] && xEdges[layout.cols] < Math.round(layout.widthCss * layout.dpr))) return null;
  return {
    row: bucketOf(layout.yEdges, yCss * layout.dpr),
    col: bucketOf(layout.xEdges, xCss * layout.dpr),
  };
}

/** A cell's rectangle in css px. */
export function cellRect(layout: Layout, row: number, col: number): { x: number; y: number; w: number; h: number } {
  const d = layout.dpr;
  const x = layout.xEdges[col] / d;
  const y = layout.yEdges[row] / d;
  return { x, y, w: layout.xEdges[col + 1] / d - x, h: layout.yEdges[row + 1] / d - y };
}

/**
 * The column (bin) holding `step`: the bin whose [start, end] contains it, or
 * the nearest bin when the step falls between two logged steps. -1 if no bins.
 */
export function colForStep(colStart: readonly number[], colEnd: readonly number[], step: number): number {
  const n = colStart.length;
  if (n === 0) return -1;
  let lo = 0;
  let hi = n - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (colStart[mid] <= step) lo = mid;
    else hi = mid - 1;
  }
  if (step > colEnd[lo] && lo + 1 < n && colStart[lo + 1] - step < step - colEnd[lo]) return lo + 1;
  return lo;
}
