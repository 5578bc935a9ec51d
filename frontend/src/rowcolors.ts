/**
 * Colour indices of the rows a panel shows (rowview.ts): a layer's row is
 * coloured once per heatmap and scale, when it is first shown, so expanding
 * or collapsing a group only copies rows; a collapsed group's row is
 * coloured from its own cells; a band stays empty (not painted).
 */
import { colorIndices, NO_DATA, type Scale } from "./colormap";
import type { RowView } from "./rowview";
import type { Heatmap } from "./types";

export class RowColors {
  private leaf: { heatmap: Heatmap; scale: Scale; idx: Uint8Array; done: Uint8Array } | null = null;
  private out: Uint8Array | null = null;

  /** Indices of every cell of `view`, row-major; the array is reused between calls. */
  indices(view: RowView, scale: Scale): Uint8Array {
    const hm = view.heatmap;
    const cols = view.cols;
    let leaf = this.leaf;
    if (!leaf || leaf.heatmap !== hm || leaf.scale.kind !== scale.kind || leaf.scale.lo !== scale.lo || leaf.scale.hi !== scale.hi) {
      leaf = this.leaf = { heatmap: hm, scale, idx: new Uint8Array(hm.rows * cols), done: new Uint8Array(hm.rows) };
    }
    const grouped = colorIndices(scale, view.grouped.values, view.grouped.states);
    const out = this.out && this.out.length === view.rows * cols ? this.out : (this.out = new Uint8Array(view.rows * cols));
    for (let r = 0; r < view.rows; r++) {
      const l = view.layer[r];
      const g = view.group[r];
      if (l >= 0) {
        const row = leaf.idx.subarray(l * cols, (l + 1) * cols);
        if (!leaf.done[l]) {
          colorIndices(scale, hm.values.subarray(l * cols, (l + 1) * cols), hm.states.subarray(l * cols, (l + 1) * cols), row);
          leaf.done[l] = 1;
        }
        out.set(row, r * cols);
      } else if (g >= 0) {
        out.set(grouped.subarray(g * cols, (g + 1) * cols), r * cols);
      } else {
        out.fill(NO_DATA, r * cols, (r + 1) * cols);
      }
    }
    return out;
  }
}
