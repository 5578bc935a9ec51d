/**
 * What a heatmap panel draws: the server's binned matrix seen through the
 * module tree (expansion, filter, order), as rows top to bottom (pure).
 *
 * A row shows a layer's own row of the matrix, a collapsed group (group.ts
 * over the rows it holds), or nothing (the band of an expanded group). The
 * matrix is not copied: a row reads its layer's cells, a group its own.
 */
import type { ScaleKind } from "./colormap";
import { groupMatrix, type GroupedMatrix } from "./group";
import { RowKind, type ModuleTree, type VisibleRow } from "./tree";
import type { Heatmap } from "./types";

export interface RowView {
  heatmap: Heatmap;
  tree: ModuleTree;
  rows: number;
  cols: number;
  /** Per row: node id (a layer's name, a group's path), what `data-layer` and cell refs carry. */
  ids: string[];
  labels: string[];
  depth: number[];
  kinds: RowKind[];
  /** Per row: shown only as an ancestor of rows the filter keeps. */
  context: boolean[];
  /** Per row: the matrix row of its own data, -1 for a group or a band. */
  layer: Int32Array;
  /** Per row: its row in `grouped`, -1 unless a collapsed group. */
  group: Int32Array;
  /** Per row: how many rows of data it holds (0 for a band). */
  size: Int32Array;
  /** Per row: the row of its parent node, -1 at the top. */
  parentRow: Int32Array;
  grouped: GroupedMatrix;
  /** Per matrix row: the row showing it (its own, or the collapsed group holding it); -1 when filtered out. */
  rowOfLayer: Int32Array;
  /** Row index by id. */
  rowOfId: Map<string, number>;
}

/** The rows of `visible` over `heatmap` (its layers are the rows of `tree`). */
export function buildRowView(heatmap: Heatmap, tree: ModuleTree, visible: readonly VisibleRow[], ranks: Int16Array, kind: ScaleKind): RowView {
  const n = visible.length;
  const layer = new Int32Array(n).fill(-1);
  const group = new Int32Array(n).fill(-1);
  const size = new Int32Array(n);
  const groups: Int32Array[] = [];
  const rowOfLayer = new Int32Array(heatmap.rows).fill(-1);
  const rowOfId = new Map<string, number>();
  visible.forEach((v, i) => {
    const node = tree.nodes[v.node];
    size[i] = v.rows.length;
    if (v.kind === RowKind.Group) {
      group[i] = groups.length;
      groups.push(v.rows);
    } else if (v.rows.length === 1) {
      layer[i] = v.rows[0];
    }
    for (const r of v.rows) rowOfLayer[r] = i;
    if (!rowOfId.has(node.id)) rowOfId.set(node.id, i);
  });
  // A parent is shown (expanded) above its children.
  const parentRow = Int32Array.from(visible, (v) => {
    const p = tree.nodes[v.node].parent;
    return p < 0 ? -1 : (rowOfId.get(tree.nodes[p].id) ?? -1);
  });
  return {
    heatmap,
    tree,
    rows: n,
    cols: heatmap.cols,
    ids: visible.map((v) => tree.nodes[v.node].id),
    labels: visible.map((v) => tree.nodes[v.node].label),
    depth: visible.map((v) => tree.nodes[v.node].depth),
    kinds: visible.map((v) => v.kind),
    context: visible.map((v) => v.context),
    layer,
    group,
    size,
    parentRow,
    grouped: groupMatrix(heatmap, groups, ranks, kind),
    rowOfLayer,
    rowOfId,
  };
}

/** The row showing `ref` (a row id, or a layer's name inside a collapsed group); -1 if none. */
export function rowOfRef(view: RowView, ref: string): number {
  const byId = view.rowOfId.get(ref);
  if (byId !== undefined) return byId;
  const node = view.tree.byId.get(ref);
  const l = node === undefined ? -1 : view.tree.nodes[node].layer;
  return l >= 0 ? view.rowOfLayer[l] : -1;
}

/** Index of a cell in the matrix holding it, or -1 (a band). */
function cellIndex(view: RowView, row: number, col: number): { m: "heatmap" | "grouped"; i: number } | null {
  if (view.layer[row] >= 0) return { m: "heatmap", i: view.layer[row] * view.cols + col };
  if (view.group[row] >= 0) return { m: "grouped", i: view.group[row] * view.cols + col };
  return null;
}

/** Value and state of a shown cell (NaN / 255 in a band). */
export function cellOf(view: RowView, row: number, col: number): { value: number; state: number; source: number } {
  const at = cellIndex(view, row, col);
  if (!at) return { value: NaN, state: 255, source: -1 };
  if (at.m === "heatmap") return { value: view.heatmap.values[at.i], state: view.heatmap.states[at.i], source: view.layer[row] };
  return { value: view.grouped.values[at.i], state: view.grouped.states[at.i], source: view.grouped.source[at.i] };
}
