/**
 * Rows of runs compared side by side, aligned (pure but for a memo): every
 * run is drawn over the SAME layer list, the union of theirs, so the module
 * tree, the rows shown and their order are the same in every panel. A layer
 * a run does not have is an empty row there (no data), at the place it has
 * in the runs that do.
 *
 * Runs of one model (the usual comparison: a failing run and its healthy
 * twin, two ranks) have equal layer lists: nothing is copied then.
 */
import { onsetKeys } from "./onset";
import type { Heatmap, NdEvent, RootCause } from "./types";

/** The state code of a cell without data (docs/FORMAT.md). */
const NO_DATA_STATE = 255;

/** A name with its occurrence (a twin, a name repeated in one list, stays a row of its own). */
function keysOf(names: readonly string[]): string[] {
  const seen = new Map<string, number>();
  return names.map((n) => {
    const k = seen.get(n) ?? 0;
    seen.set(n, k + 1);
    return `${k}\u0000${n}`;
  });
}

const nameOfKey = (key: string): string => key.slice(key.indexOf("\u0000") + 1);

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/**
 * The union of layer lists: the first list in its order, then each name only
 * a later list has, right after the name it follows there (at the top when it
 * follows none), so a run's own rows keep their order.
 */
export function unionLayers(lists: readonly (readonly string[])[]): string[] {
  if (lists.length === 0) return [];
  if (lists.every((l) => sameList(l, lists[0]))) return [...lists[0]];
  const out = keysOf(lists[0]);
  const has = new Set(out);
  for (const list of lists.slice(1)) {
    let after = -1; // index in `out` of the last key of this list placed
    for (const key of keysOf(list)) {
      if (has.has(key)) {
        after = out.indexOf(key);
        continue;
      }
      out.splice(after + 1, 0, key);
      has.add(key);
      after++;
    }
  }
  return out.map(nameOfKey);
}

/** `hm` over the rows `names` (a superset of its layers): rows it lacks hold no data. */
export function padHeatmap(hm: Heatmap, names: readonly string[]): Heatmap {
  if (sameList(hm.layers, names)) return hm;
  const cols = hm.cols;
  const rowOf = new Map(keysOf(hm.layers).map((k, r) => [k, r]));
  const values = new Float32Array(names.length * cols).fill(NaN);
  const states = new Uint8Array(names.length * cols).fill(NO_DATA_STATE);
  keysOf(names).forEach((key, i) => {
    const r = rowOf.get(key);
    if (r === undefined) return;
    values.set(hm.values.subarray(r * cols, (r + 1) * cols), i * cols);
    states.set(hm.states.subarray(r * cols, (r + 1) * cols), i * cols);
  });
  return { ...hm, rows: names.length, layers: [...names], values, states };
}

/** What a run brings to the alignment. */
export interface AlignInput {
  run: string;
  heatmap: Heatmap;
  events: readonly NdEvent[];
  rootCause: RootCause | null;
}

export interface Aligned {
  /** The rows every panel draws. */
  names: string[];
  /** Each run's heatmap over `names`. */
  heatmaps: Map<string, Heatmap>;
  /**
   * The anomalies-first keys over `names` (onset.ts), shared: a row's
   * earliest onset in any of the runs, so the order is one for all panels.
   * Computed on the first call (a scan of every run's cells), then the same array.
   */
  order(): Float64Array;
}

/**
 * Aligns the runs shown; the same answer (same objects) while their heatmaps,
 * events and root causes stay, so the row models downstream stay memoized.
 */
export class RunAlignment {
  private last: { inputs: AlignInput[]; ranks: Int16Array; out: Aligned } | null = null;

  align(inputs: readonly AlignInput[], ranks: Int16Array): Aligned {
    const last = this.last;
    if (
      last &&
      last.ranks === ranks &&
      last.inputs.length === inputs.length &&
      last.inputs.every((a, i) => {
        const b = inputs[i];
        return a.run === b.run && a.heatmap === b.heatmap && a.events === b.events && a.rootCause === b.rootCause;
      })
    ) {
      return last.out;
    }
    const names = unionLayers(inputs.map((x) => x.heatmap.layers));
    const heatmaps = new Map(inputs.map((x) => [x.run, padHeatmap(x.heatmap, names)]));
    let keys: Float64Array | null = null;
    const order = (): Float64Array => {
      if (keys) return keys;
      keys = new Float64Array(names.length).fill(Infinity);
      for (const x of inputs) {
        const own = onsetKeys(names, x.events, x.rootCause, heatmaps.get(x.run), ranks);
        for (let i = 0; i < own.length; i++) if (own[i] < keys[i]) keys[i] = own[i];
      }
      return keys;
    };
    const out = { names, heatmaps, order };
    this.last = { inputs: [...inputs], ranks, out };
    return out;
  }
}
