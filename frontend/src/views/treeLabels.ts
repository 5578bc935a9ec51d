/**
 * The heatmap's row labels as a tree widget (WAI-ARIA tree: one treeitem
 * per row, a roving tabindex): indented names, a triangle on groups, click
 * or keyboard to expand and collapse (keys.ts treeKeyAction). Names are set
 * with textContent only.
 */
import { el, setChildren } from "../dom";
import { treeKeyAction } from "../keys";
import { LABEL_MIN_ROW, type Layout } from "../layout";
import type { RowView } from "../rowview";
import { CLASS } from "../styles";
import { RowKind } from "../tree";
import { fitLabel, INDENT, LABEL_MAX, TWISTY } from "./labels";

export interface TreeLabelCallbacks {
  /** Expand (true) or collapse (false) the row's group. */
  onToggle(row: number, open: boolean): void;
  /** Enter on a row of data: open it. */
  onActivate(row: number): void;
  /** The keyboard or a click moved to a row. */
  onFocusRow(row: number): void;
}

const TWISTY_TEXT: Record<RowKind, string> = { [RowKind.Leaf]: "", [RowKind.Group]: "▸", [RowKind.Open]: "▾" };

export class TreeLabels {
  readonly element: HTMLElement;
  private els: HTMLElement[] = [];
  private view: RowView | null = null;
  private key = "";
  private activeRow = -1;

  constructor(run: string, private readonly cb: TreeLabelCallbacks) {
    this.element = el("div", {
      class: "nd-labels",
      attrs: { role: "tree", "aria-label": `Layers of run ${run}` },
      on: {
        keydown: (e) => this.onKey(e),
        click: (e) => this.onClick(e),
      },
    });
  }

  /**
   * Labels for the rows of `view` laid out by `layout`; `rootRow` is the row
   * holding the root cause (itself or a collapsed group), `rootLayer` its name.
   * Rebuilt only when the rows or their size change (keeps hover and focus).
   */
  render(view: RowView, layout: Layout, width: number, rootRow: number, rootLayer: string | null, types: ReadonlyMap<string, string>): void {
    const key = JSON.stringify([view.ids, view.kinds, rootRow, layout.rowHeightCss, layout.dpr, width]);
    this.view = view;
    if (key === this.key) return;
    this.key = key;
    const focusedId = this.focusedRow() >= 0 ? view.ids[this.focusedRow()] ?? null : null;
    const hadFocus = this.element.contains(document.activeElement);
    const tree = view.tree.nodes.some((n) => n.children.length > 0);
    const h = Math.max(layout.rowHeightCss, 12);
    // Rows too thin for a label each: label every k-th row (away from the
    // root-cause label) so the eye can still find its way.
    const k = Math.ceil(14 / layout.rowHeightCss);
    this.els = view.ids.map((id, r) => {
      const kind = view.kinds[r];
      const depth = view.depth[r];
      const isRoot = r === rootRow;
      const tick = layout.rowHeightCss < LABEL_MIN_ROW && r % k === 0 && (rootRow < 0 || Math.abs(r - rootRow) >= k);
      const band = kind === RowKind.Open && view.layer[r] < 0;
      const indent = tree ? depth * INDENT : 0;
      // The root cause's mark takes 12 px more: flat labels (right-aligned) may
      // spill left into the panel's margin; a tree's column has room for it.
      const room = tree ? width - indent - TWISTY - 34 : isRoot ? LABEL_MAX - 34 : width - 22;
      const type = view.layer[r] >= 0 ? types.get(view.heatmap.layers[view.layer[r]]) : undefined;
      const below = view.tree.nodes[view.tree.byId.get(id)!].rows.length;
      const what = kind === RowKind.Group ? `worst of ${view.size[r]} layers` : kind === RowKind.Open ? `${below} layers` : "";
      const cls = ["nd-label", tick && "nd-label-tick", kind === RowKind.Group && "nd-label-group", band && "nd-label-band", view.context[r] && "nd-label-context"];
      return el(
        "div",
        {
          class: cls.filter(Boolean).join(" "),
          attrs: {
            role: "treeitem",
            tabindex: -1,
            "aria-level": depth + 1,
            "aria-expanded": kind === RowKind.Leaf ? undefined : String(kind === RowKind.Open),
            "data-row": r,
            "data-layer": id,
            "data-kind": kind === RowKind.Leaf ? "leaf" : kind === RowKind.Group ? "group" : "open",
            "data-root-cause": isRoot ? (rootLayer ?? id) : undefined,
            title: [id, type ? `(${type})` : "", what ? `· ${what}` : ""].filter(Boolean).join(" "),
          },
          style: {
            top: `${layout.yEdges[r] / layout.dpr}px`,
            height: `${h}px`,
            lineHeight: `${h}px`,
            marginTop: layout.rowHeightCss < 12 ? `${(layout.rowHeightCss - 12) / 2}px` : "",
            paddingLeft: tree ? `${indent}px` : "",
          },
        },
        [
          tree ? el("span", { class: "nd-twisty", text: TWISTY_TEXT[kind], attrs: { "aria-hidden": "true" } }) : null,
          el("span", { class: "nd-label-text", text: fitLabel(view.labels[r], room) }),
        ],
      );
    });
    this.element.classList.toggle(CLASS.compact, layout.rowHeightCss < LABEL_MIN_ROW);
    this.element.classList.toggle("nd-tree", tree);
    setChildren(this.element, this.els);
    const again = focusedId === null ? -1 : view.ids.indexOf(focusedId);
    this.setActive(again >= 0 ? again : Math.min(this.activeRow, this.els.length - 1));
    if (hadFocus && again >= 0) this.els[again].focus({ preventScroll: true });
  }

  /** Mark the cursor's row (the one Tab reaches); -1 for none. */
  setActive(row: number): void {
    this.els[this.activeRow]?.classList.remove(CLASS.labelActive);
    this.els[this.activeRow]?.setAttribute("tabindex", "-1");
    this.activeRow = row;
    const target = this.els[row] ?? this.els[0];
    target?.setAttribute("tabindex", "0");
    this.els[row]?.classList.add(CLASS.labelActive);
  }

  private focusedRow(): number {
    const a = document.activeElement;
    return a instanceof HTMLElement && this.element.contains(a) && a.dataset.row ? Number(a.dataset.row) : -1;
  }

  private rowOf(e: Event): number {
    const t = (e.target as HTMLElement | null)?.closest?.("[data-row]");
    return t instanceof HTMLElement ? Number(t.dataset.row) : -1;
  }

  private onClick(e: MouseEvent): void {
    const view = this.view;
    const row = this.rowOf(e);
    if (!view || row < 0) return;
    this.els[row]?.focus({ preventScroll: true });
    const kind = view.kinds[row];
    if (kind === RowKind.Leaf) this.cb.onFocusRow(row);
    else this.cb.onToggle(row, kind === RowKind.Group);
  }

  private onKey(e: KeyboardEvent): void {
    const view = this.view;
    const row = this.focusedRow();
    if (!view || row < 0) return;
    const action = treeKeyAction(e.key, row, view.rows, view.kinds[row], view.parentRow[row]);
    if (!action) return;
    e.preventDefault();
    e.stopPropagation();
    if (action.kind === "move") {
      this.setActive(action.row);
      this.els[action.row]?.focus({ preventScroll: false });
      this.cb.onFocusRow(action.row);
    } else if (action.kind === "toggle") {
      this.cb.onToggle(row, action.open);
    } else {
      this.cb.onActivate(row);
    }
  }
}
