/** The toolbar (metric, zoom and pan buttons, range) and the run selector. */
import { METRIC_MENU } from "../colormap";
import { el, setChildren } from "../dom";
import { formatSteps } from "../format";
import { CLASS } from "../styles";
import type { RunInfo, StepRange } from "../types";

export interface ToolbarCallbacks {
  onMetric(metric: string): void;
  onZoom(factor: number): void;
  onPan(fraction: number): void;
  onFit(): void;
}

export class Toolbar {
  readonly element: HTMLElement;
  private readonly metric: HTMLSelectElement;
  private readonly range = el("span", { class: "nd-range", attrs: { "aria-live": "polite" } });
  readonly status = el("span", { class: "nd-status-line", attrs: { "aria-live": "polite" } });

  constructor(cb: ToolbarCallbacks) {
    this.metric = el(
      "select",
      { attrs: { "aria-label": "Metric" }, on: { change: () => cb.onMetric(this.metric.value) } },
      METRIC_MENU.map((m) => el("option", { text: m.label, attrs: { value: m.id } })),
    );
    const btn = (text: string, label: string, fn: () => void) =>
      el("button", { class: "nd-btn", text, attrs: { type: "button", "aria-label": label, title: label }, on: { click: fn } });
    this.element = el("header", { class: "nd-toolbar" }, [
      el("span", { class: "nd-title" }, ["NeuralDbg", el("small", { text: "layer × step failure map" })]),
      el("label", { class: "nd-field" }, ["Metric", this.metric]),
      el("span", { class: "nd-btngroup", attrs: { role: "group", "aria-label": "Zoom and pan" } }, [
        btn("−", "Zoom out (-)", () => cb.onZoom(2)),
        btn("+", "Zoom in (+)", () => cb.onZoom(0.5)),
        btn("◀", "Pan left ([)", () => cb.onPan(-0.25)),
        btn("▶", "Pan right (])", () => cb.onPan(0.25)),
        btn("Fit", "Show all steps", () => cb.onFit()),
      ]),
      this.range,
      el("span", { class: "nd-spacer" }),
      this.status,
    ]);
  }

  setMetric(metric: string): void {
    this.metric.value = metric;
  }

  setRange(r: StepRange | null, zoomed: boolean): void {
    this.range.textContent = r ? `${formatSteps(r.start, r.end)}${zoomed ? " (zoomed)" : ""}` : "";
  }
}

export interface RunListCallbacks {
  /** Show only this run. */
  onOnly(run: string): void;
  /** Add or remove a run from the side-by-side comparison. */
  onToggle(run: string, on: boolean): void;
}

export class RunList {
  readonly element: HTMLElement;
  private readonly list = el("ul", { class: "nd-runlist" });

  constructor(private readonly cb: RunListCallbacks) {
    this.element = el("section", { class: "nd-card", attrs: { "aria-label": "Runs" } }, [el("h2", { text: "Runs" }), this.list]);
  }

  update(runs: readonly RunInfo[], selected: readonly string[]): void {
    setChildren(
      this.list,
      runs.map((r) => {
        const on = selected.includes(r.run);
        const box = el("input", {
          attrs: { type: "checkbox", "aria-label": `Compare ${r.run}`, title: "Show side by side" },
          on: { change: () => this.cb.onToggle(r.run, box.checked) },
        });
        box.checked = on;
        const rc = r.root_cause;
        return el("li", { class: `nd-runitem${on ? ` ${CLASS.selected}` : ""}`, attrs: { "data-run": r.run } }, [
          box,
          el("button", {
            class: "nd-runname",
            text: r.run,
            attrs: {
              type: "button",
              "aria-pressed": on,
              title: rc ? `${r.run}: ${rc.kind} in ${rc.layer} at step ${rc.step}` : `${r.run}: ${r.status}`,
            },
            on: { click: () => this.cb.onOnly(r.run) },
          }),
          el("span", { class: `nd-dot nd-dot-${r.status}`, attrs: { title: r.status, "aria-label": r.status } }),
        ]);
      }),
    );
  }
}
