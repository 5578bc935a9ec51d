/**
 * One run's rows, rebuilt only when something they depend on changed: the
 * module tree (per layer list), then for a heatmap and the tree state the
 * rows shown (filter, order, expansion) and their cells (rowview.ts). A
 * redraw for a cursor move or a hover costs nothing here.
 */
import type { ScaleKind } from "./colormap";
import { onsetKeys } from "./onset";
import { keptRows, typesOf } from "./rowfilter";
import { buildRowView, type RowView } from "./rowview";
import type { StateTable } from "./states";
import { buildTree, type ModuleTree, visibleRows } from "./tree";
import type { TreeState } from "./treestate";
import type { Heatmap, Meta, NdEvent, RootCause } from "./types";

export interface RowInput {
  heatmap: Heatmap;
  /** The run's meta: the module types the filter matches. */
  meta: Meta;
  events: readonly NdEvent[];
  rootCause: RootCause | null;
  states: StateTable;
  kind: ScaleKind;
  state: TreeState;
  /** The default expansion (tree.ts defaultExpansion). */
  auto: ReadonlySet<string>;
  /** Anomalies-first keys to use instead of this run's own: runs compared side by side share theirs (align.ts). */
  order?: Float64Array;
}

export class RowModel {
  private treeKey = "";
  private treeMemo: ModuleTree | null = null;
  private last: { input: RowInput; version: number; view: RowView } | null = null;
  private types: { meta: Meta; map: Map<string, string> } | null = null;

  /** The tree of a layer list (the same object while the names stay). */
  tree(names: readonly string[]): ModuleTree {
    const key = names.join("\n");
    if (!this.treeMemo || key !== this.treeKey) {
      this.treeKey = key;
      this.treeMemo = buildTree(names);
    }
    return this.treeMemo;
  }

  view(input: RowInput): RowView {
    const last = this.last;
    if (
      last &&
      last.version === input.state.version &&
      // Both inputs' keys: an optional one (order) left out now must not match the last view's.
      (Object.keys({ ...last.input, ...input }) as (keyof RowInput)[]).every((k) => last.input[k] === input[k])
    ) {
      return last.view;
    }
    const hm = input.heatmap;
    const tree = this.tree(hm.layers);
    const ranks = input.states.ranks();
    const state = input.state;
    const visible = visibleRows(tree, {
      expanded: (node) => state.isOpen(node.id, input.auto),
      keep: keptRows(hm.layers, this.typesOf(input.meta), state.filter),
      order: state.order === "onset" ? (input.order ?? onsetKeys(hm.layers, input.events, input.rootCause, hm, ranks)) : null,
    });
    const view = buildRowView(hm, tree, visible, ranks, input.kind);
    this.last = { input, version: state.version, view };
    return view;
  }

  private typesOf(meta: Meta): Map<string, string> {
    if (!this.types || this.types.meta !== meta) this.types = { meta, map: typesOf(meta.layers) };
    return this.types.map;
  }
}
