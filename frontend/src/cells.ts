/**
 * What a blank cell means (pure, unit tested in test/cells.test.ts): the
 * heatmap answer's cell notes (docs/API.md, *Cell notes*) read into a
 * decoded heatmap. A blank must not read as health: a step the GradScaler
 * skipped is hatched, a metric sampled every N steps shows the value held
 * from its last sample, and a row without the metric says why in a word.
 */
import { STATE_HEALTHY, STATE_UNKNOWN } from "./states";
import type { CellNotes, Heatmap } from "./types";

export type { CellNotes };

export const NO_NOTES: CellNotes = { skipped: null, every: null, empty: null, held: null };

/**
 * Fill the blank cells of each sampled row (every > 1) with the value of its
 * last sample, in place; returns the mask of cells so filled (null if none).
 * A cell in a failing state is left as it is (its value is the evidence), and
 * so is a column of steps a GradScaler skipped.
 */
export function holdSampled(
  values: Float32Array,
  states: Uint8Array,
  rows: number,
  cols: number,
  every: Int32Array | null,
  skipped: Int32Array | null = null,
): Uint8Array | null {
  if (!every) return null;
  let held: Uint8Array | null = null;
  for (let r = 0; r < rows && r < every.length; r++) {
    if (every[r] <= 1) continue;
    let last = NaN;
    for (let c = 0, i = r * cols; c < cols; c++, i++) {
      const v = values[i];
      if (v === v) {
        last = v;
        continue;
      }
      const s = states[i];
      // (a skipped step is not between samples: the hatch says what it is)
      if (last !== last || (s !== STATE_HEALTHY && s !== STATE_UNKNOWN) || (skipped && skipped[c] > 0)) continue;
      values[i] = last;
      (held ??= new Uint8Array(rows * cols))[i] = 1;
    }
  }
  return held;
}

/** [first, end) column runs with skipped steps, for one hatched rect each. */
export function skippedRuns(skipped: Int32Array | null): [number, number][] {
  const runs: [number, number][] = [];
  if (!skipped) return runs;
  for (let c = 0; c < skipped.length; c++) {
    if (skipped[c] <= 0) continue;
    const start = c;
    while (c + 1 < skipped.length && skipped[c + 1] > 0) c++;
    runs.push([start, c + 1]);
  }
  return runs;
}

/** The notes of a heatmap answer, decoded leniently (absent or malformed: null). */
export function decodeNotes(o: Record<string, unknown>, rows: number, cols: number): Omit<CellNotes, "held"> {
  const ints = (x: unknown, n: number): Int32Array | null =>
    Array.isArray(x) && x.length === n && x.every((v) => typeof v === "number" && Number.isFinite(v)) ? Int32Array.from(x as number[]) : null;
  const empty =
    Array.isArray(o.empty) && o.empty.length === rows
      ? o.empty.map((v) => (typeof v === "string" && v ? v.slice(0, 40) : null))
      : null;
  return { skipped: ints(o.skipped, cols), every: ints(o.every, rows), empty };
}

/** The notes of one cell for its tooltip (`layer`: its matrix row, -1 for a group). */
export function cellNotes(hm: Heatmap, layer: number, col: number): { skipped?: number; every?: number; held?: boolean; empty?: string | null } {
  const n = hm.notes;
  if (!n) return {};
  return {
    skipped: n.skipped ? n.skipped[col] : undefined,
    every: layer >= 0 && n.every ? n.every[layer] : undefined,
    held: layer >= 0 && n.held ? n.held[layer * hm.cols + col] === 1 : undefined,
    empty: layer >= 0 && n.empty ? n.empty[layer] : undefined,
  };
}

/** "skipped=N held=N empty=K" of a heatmap's notes (a panel's data-notes, for tests). */
export function notesSummary(hm: Heatmap): string {
  const n = hm.notes;
  if (!n) return "";
  const skipped = n.skipped ? n.skipped.reduce((a, v) => a + (v > 0 ? 1 : 0), 0) : 0;
  const held = n.held ? n.held.reduce((a, v) => a + v, 0) : 0;
  const empty = n.empty ? n.empty.filter((v) => v).length : 0;
  return `skipped=${skipped} held=${held} empty=${empty}`;
}
