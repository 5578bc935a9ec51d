/**
 * The anomalies-first order (pure): each row's sort key is the step its
 * first failure starts, so failing rows come first in onset order and the
 * rows that never failed keep forward order after them.
 *
 * The onset of a row is its first warning or error event (the diagnosis's
 * own transitions, exact and the same at any zoom), or the run's root cause
 * for its layer; a row failing without an event in the list (a truncated
 * list) falls back to its first failing bin of the heatmap shown. On equal
 * steps the root cause goes first (the diagnosis broke that tie already).
 */
import { STATE_HEALTHY } from "./states";
import type { Heatmap, NdEvent, RootCause } from "./types";

/** Sort keys, one per row of `names`: 2 * onset step (+1 unless it is the root cause); Infinity = never failed. */
export function onsetKeys(
  names: readonly string[],
  events: readonly NdEvent[],
  rootCause: RootCause | null,
  heatmap?: Heatmap | null,
  ranks?: Int16Array,
): Float64Array {
  const rowOf = new Map<string, number>();
  names.forEach((n, i) => {
    if (!rowOf.has(n)) rowOf.set(n, i);
  });
  const keys = new Float64Array(names.length).fill(Infinity);
  const put = (row: number | undefined, key: number) => {
    if (row !== undefined && key < keys[row]) keys[row] = key;
  };
  for (const e of events) if (e.severity !== "info") put(rowOf.get(e.layer), 2 * e.step + 1);
  if (rootCause) put(rowOf.get(rootCause.layer), 2 * rootCause.step);
  if (heatmap && ranks && heatmap.cols > 0) {
    const healthy = ranks[STATE_HEALTHY];
    heatmap.layers.forEach((name, r) => {
      const row = rowOf.get(name);
      if (row === undefined || keys[row] !== Infinity) return;
      const base = r * heatmap.cols;
      for (let c = 0; c < heatmap.cols; c++) {
        if (ranks[heatmap.states[base + c]] > healthy) {
          keys[row] = 2 * heatmap.colStart[c] + 1;
          return;
        }
      }
    });
  }
  return keys;
}
