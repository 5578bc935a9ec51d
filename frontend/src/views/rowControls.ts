/**
 * The bar above the heatmaps that chooses the rows: a filter box (part of a
 * name or a module type), the order (forward, or anomalies first), expand
 * and collapse all, and how many rows are shown.
 */
import { el } from "../dom";
import { CLASS } from "../styles";
import type { RowOrder } from "../treestate";

export interface RowControlsCallbacks {
  onFilter(text: string): void;
  onOrder(order: RowOrder): void;
  /** Expand (true) or collapse (false) every group. */
  onAll(open: boolean): void;
}

/** Typing pauses this long before the rows are filtered (one redraw per word, not per key). */
const FILTER_DELAY_MS = 150;

export class RowControls {
  readonly element: HTMLElement;
  private readonly input: HTMLInputElement;
  private readonly orders: Record<RowOrder, HTMLButtonElement>;
  private readonly treeButtons: HTMLElement;
  private readonly count = el("span", { class: `${CLASS.statusLine} nd-rowcount`, attrs: { "aria-live": "polite" } });
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(private readonly cb: RowControlsCallbacks) {
    this.input = el("input", {
      class: "nd-filter",
      attrs: {
        type: "search",
        placeholder: "Filter layers: name or type",
        "aria-label": "Filter layers by name or module type",
        title: "Part of a layer name or a module type (LayerNorm). Words must all match; a comma separates alternatives.",
        spellcheck: "false",
        autocomplete: "off",
      },
      on: {
        input: () => {
          clearTimeout(this.timer);
          this.timer = setTimeout(() => this.cb.onFilter(this.input.value), FILTER_DELAY_MS);
        },
        keydown: (e) => {
          if (e.key === "Enter") {
            clearTimeout(this.timer);
            this.cb.onFilter(this.input.value);
          } else if (e.key === "Escape" && this.input.value) {
            e.stopPropagation();
            this.input.value = "";
            clearTimeout(this.timer);
            this.cb.onFilter("");
          }
        },
      },
    });
    const btn = (text: string, title: string, fn: () => void, attrs: Record<string, string> = {}) =>
      el("button", { class: CLASS.btn, text, attrs: { type: "button", title, ...attrs }, on: { click: fn } });
    this.orders = {
      forward: btn("Forward", "Rows in forward order", () => this.cb.onOrder("forward"), { "data-order": "forward" }),
      onset: btn("Anomalies first", "Failing rows first, in the order their failures start", () => this.cb.onOrder("onset"), { "data-order": "onset" }),
    };
    this.treeButtons = el("span", { class: "nd-btngroup", attrs: { role: "group", "aria-label": "Groups" } }, [
      btn("Expand all", "Expand every group", () => this.cb.onAll(true)),
      btn("Collapse all", "Collapse every group", () => this.cb.onAll(false)),
    ]);
    this.element = el("section", { class: `${CLASS.card} nd-rowbar`, attrs: { "aria-label": "Rows" } }, [
      this.input,
      el("span", { class: "nd-btngroup nd-order", attrs: { role: "group", "aria-label": "Row order" } }, [this.orders.forward, this.orders.onset]),
      this.treeButtons,
      el("span", { class: CLASS.spacer }),
      this.count,
    ]);
  }

  /** Show the state (as read from the URL, or after a change). */
  set(filter: string, order: RowOrder): void {
    if (this.input.value !== filter && document.activeElement !== this.input) this.input.value = filter;
    for (const [k, b] of Object.entries(this.orders)) b.setAttribute("aria-pressed", String(k === order));
  }

  /** Rows shown of the primary run; `grouped`: whether its model has groups at all (else no expand buttons). */
  setCounts(shown: number, layers: number, kept: number | null, grouped: boolean): void {
    this.treeButtons.style.display = grouped ? "" : "none";
    const rows = `${shown} row${shown === 1 ? "" : "s"}`;
    this.count.textContent = kept === null ? `${rows} · ${layers} layers` : `${rows} · ${kept} of ${layers} layers match`;
  }
}
