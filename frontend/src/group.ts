/**
 * Collapsed groups of rows, computed over the binned matrix the server sent
 * (never over raw steps, so a group costs one pass over its rows' bins).
 *
 * The rule is the server's rule for a bin (server/heatmap.py, docs/API.md),
 * applied across rows instead of steps, so one failing cell stays visible
 * in a collapsed group:
 * - a cell's state is the worst state (highest rank) of its rows' cells;
 * - its value is, when that state is a failure, the value of the first row
 *   (forward order) in that state; otherwise the extreme of the rows'
 *   values: farthest from 1 on a log scale, the maximum on a linear one.
 *   +-Inf wins over any finite value, NaN ("not measured") loses to any
 *   value; ties go to the first row.
 * - `source` keeps the row that decided each cell (the tooltip names it, a
 *   click expands the group onto it).
 */
import type { ScaleKind } from "./colormap";
import { STATE_HEALTHY, STATE_UNKNOWN } from "./states";

export interface Matrix {
  cols: number;
  values: Float32Array;
  states: Uint8Array;
}

export interface GroupedMatrix extends Matrix {
  rows: number;
  /** Row of the source matrix that decided each cell, -1 for a group without rows. */
  source: Int32Array;
}

// Beyond any finite value's score under the log rule (max(|v|, 1/|v|) <= 7.2e44
// for float32), below a non-finite value's Infinity.
const ZERO_SCORE = 1e300;

/** How extreme a value is (higher wins); -Infinity for NaN. */
export function extremeScore(v: number, kind: ScaleKind): number {
  if (v !== v) return -Infinity;
  if (v === Infinity || v === -Infinity) return Infinity;
  if (kind === "log") {
    const a = v < 0 ? -v : v;
    // |log10 a| grows with max(a, 1/a): no logarithm per cell.
    return a === 0 ? ZERO_SCORE : a >= 1 ? a : 1 / a;
  }
  return v;
}

/**
 * One row per group of `groups` (each a list of rows of `m`): the worst state
 * and the chosen metric's extreme per column. `kind` is the metric's scale
 * ("state": the value is the state code). `ranks` ranks every uint8 code
 * (StateTable.ranks()).
 */
export function groupMatrix(m: Matrix, groups: readonly Int32Array[], ranks: Int16Array, kind: ScaleKind): GroupedMatrix {
  const { cols } = m;
  const vals = m.values;
  const sts = m.states;
  const n = groups.length;
  const values = new Float32Array(n * cols).fill(NaN);
  const states = new Uint8Array(n * cols).fill(STATE_UNKNOWN);
  const source = new Int32Array(n * cols).fill(-1);
  const worstRank = new Int16Array(cols);
  const worstSrc = new Int32Array(cols);
  // Log rule: the largest and the smallest |v| of a column and their rows
  // (the extreme is one of the two: no score, no division per cell).
  // Linear rule: the maximum (an infinity of either sign wins) in `hi`.
  const hi = new Float64Array(cols);
  const hiSrc = new Int32Array(cols);
  const lo = new Float64Array(cols);
  const loSrc = new Int32Array(cols);
  const healthy = ranks[STATE_HEALTHY];
  const log = kind === "log";
  for (let g = 0; g < n; g++) {
    const rows = groups[g];
    if (rows.length === 0) continue;
    // The first row sets every column it measures (NaN never compares true);
    // a column never measured keeps the first row (its NaN).
    worstRank.fill(-2);
    hi.fill(log ? -1 : -Infinity);
    lo.fill(Infinity);
    hiSrc.fill(rows[0]);
    loSrc.fill(rows[0]);
    for (let k = 0; k < rows.length; k++) {
      const r = rows[k];
      const base = r * cols;
      for (let c = 0; c < cols; c++) {
        const rank = ranks[sts[base + c]];
        if (rank > worstRank[c]) {
          worstRank[c] = rank;
          worstSrc[c] = r;
        }
      }
      // One tight loop per rule: this runs over every cell of a collapsed model.
      if (log) {
        for (let c = 0; c < cols; c++) {
          const v = vals[base + c];
          const a = v < 0 ? -v : v;
          if (a > hi[c]) {
            hi[c] = a;
            hiSrc[c] = r;
          }
          if (a < lo[c]) {
            lo[c] = a;
            loSrc[c] = r;
          }
        }
      } else {
        for (let c = 0; c < cols; c++) {
          const v = vals[base + c];
          const s = v === -Infinity ? Infinity : v;
          if (s > hi[c]) {
            hi[c] = s;
            hiSrc[c] = r;
          }
        }
      }
    }
    const out = g * cols;
    for (let c = 0; c < cols; c++) {
      let src = hiSrc[c];
      if (log && hi[c] >= 0 && hi[c] !== Infinity) {
        // 0 < lo <= hi: lo is farther from 1 in log iff lo * hi < 1; a zero is farthest.
        const p = lo[c] * hi[c];
        if (lo[c] === 0 || p < 1) src = loSrc[c];
        else if (p === 1 && lo[c] !== hi[c]) src = Math.min(loSrc[c], hiSrc[c]);
      }
      if (worstRank[c] > healthy) src = worstSrc[c];
      const state = sts[worstSrc[c] * cols + c];
      states[out + c] = state;
      values[out + c] = kind === "state" ? state : vals[src * cols + c];
      source[out + c] = src;
    }
  }
  return { rows: n, cols, values, states, source };
}
