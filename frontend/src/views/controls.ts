/** The toolbar (metric, zoom and pan buttons, range) and the run selector. */
import { el, setChildren } from "../dom";
import { formatSteps } from "../format";
import type { MetricTable } from "../metrics";
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
  /** The table the metric choices are labelled with. */
  private metrics: MetricTable;
  private readonly range = el("span", { class: "nd-range", attrs: { "aria-live": "polite" } });
  readonly status = el("span", { class: CLASS.statusLine, attrs: { "aria-live": "polite" } });

  constructor(cb: ToolbarCallbacks, metrics: MetricTable) {
    this.metrics = metrics;
    this.metric = el(
      "select",
      { attrs: { "aria-label": "Metric" }, on: { change: () => cb.onMetric(this.metric.value) } },
      metrics.menu().map((m) => el("option", { text: m.label, attrs: { value: m.id, title: m.description || undefined } })),
    );
    const btn = (text: string, label: string, fn: () => void) =>
      el("button", { class: CLASS.btn, text, attrs: { type: "button", "aria-label": label, title: label }, on: { click: fn } });
    this.element = el("header", { class: "nd-toolbar" }, [
      el("span", { class: "nd-title" }, ["NeuralDbg", el("small", { text: "layer × step failure map" })]),
      el("label", { class: CLASS.field }, ["Metric", this.metric]),
      el("span", { class: "nd-btngroup", attrs: { role: "group", "aria-label": "Zoom and pan" } }, [
        btn("−", "Zoom out (-)", () => cb.onZoom(2)),
        btn("+", "Zoom in (+)", () => cb.onZoom(0.5)),
        btn("◀", "Pan left ([)", () => cb.onPan(-0.25)),
        btn("▶", "Pan right (])", () => cb.onPan(0.25)),
        btn("Fit", "Show all steps", () => cb.onFit()),
      ]),
      this.range,
      el("span", { class: CLASS.spacer }),
      this.status,
    ]);
  }

  setMetric(metric: string): void {
    this.metric.value = metric;
  }

  /** Label the metric choices (same ones, same order) with this table: the server's once a run is in. */
  setMetricTable(metrics: MetricTable): void {
    if (metrics === this.metrics) return;
    this.metrics = metrics;
    metrics.menu().forEach((m, i) => {
      const option = this.metric.options[i];
      option.textContent = m.label;
      if (m.description) option.title = m.description;
      else option.removeAttribute("title");
    });
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
    this.element = el("section", { class: CLASS.card, attrs: { "aria-label": "Runs" } }, [el("h2", { text: "Runs" }), this.list]);
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
