/** The toolbar (metric, zoom and pan buttons, range) and the run selector. */
import { el, setChildren } from "../dom";
import { causeTitle } from "../banner";
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

/** Characters of a root cause's layer shown in the run list (its title has the whole name). */
const SUMMARY_LAYER = 14;

/** The last segments of a module path that fit SUMMARY_LAYER characters ("…37.mlp.fc1"): its end says which module it is. */
export function shortLayer(name: string): string {
  if (name.length <= SUMMARY_LAYER) return name;
  const segs = name.split(".");
  let tail = segs.pop()!;
  while (segs.length && segs[segs.length - 1].length + 1 + tail.length <= SUMMARY_LAYER - 1) tail = `${segs.pop()}.${tail}`;
  return tail.length <= SUMMARY_LAYER - 1 ? `…${tail}` : `…${tail.slice(2 - SUMMARY_LAYER)}`;
}

/**
 * A run's status and root cause in one line (from `runs`), so twenty runs
 * compare at a glance: "Exploding gradient · fc3 @ 80", "healthy · 300 steps".
 */
export function runSummary(r: RunInfo): { text: string; full: string; tone: "failing" | "warning" | "healthy" } {
  const rc = r.root_cause;
  if (rc) {
    const title = causeTitle(rc.kind, rc.layer, rc.message ?? "");
    return { text: `${title} · ${shortLayer(rc.layer)} @ ${rc.step}`, full: `${title} in ${rc.layer} from step ${rc.step}`, tone: r.status === "failing" ? "failing" : "warning" };
  }
  const text = r.status === "failing" ? "failing, no single root cause" : `healthy · ${r.num_steps} step${r.num_steps === 1 ? "" : "s"}`;
  return { text, full: text, tone: r.status === "failing" ? "failing" : "healthy" };
}

/**
 * A run name as text with a line-break opportunity after each separator
 * (`/`, `_`, `-`, `.`, `,`, `=`, space), so a long name wraps between its
 * words rather than inside one; its text is the name unchanged.
 */
export function breakable(name: string): (string | HTMLElement)[] {
  const out: (string | HTMLElement)[] = [];
  for (const part of name.split(/(?<=[/_\-.,= ])/)) {
    if (out.length) out.push(el("wbr"));
    out.push(part);
  }
  return out;
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
        const sum = runSummary(r);
        return el("li", { class: `nd-runitem${on ? ` ${CLASS.selected}` : ""}`, attrs: { "data-run": r.run } }, [
          box,
          el(
            "button",
            {
              class: "nd-runname",
              attrs: { type: "button", "aria-pressed": on, title: `${r.run}: ${sum.full}` },
              on: { click: () => this.cb.onOnly(r.run) },
            },
            [
              el("span", { class: "nd-runname-text", attrs: { title: r.run } }, breakable(r.run)),
              el("span", { class: `nd-dot nd-dot-${r.status}`, attrs: { title: r.status, "aria-label": r.status } }),
            ],
          ),
          // Under the checkbox too: the line needs the whole width.
          el("span", {
            class: `nd-runsum nd-runsum-${sum.tone}`,
            text: sum.text,
            attrs: { "data-testid": "run-summary", title: sum.full },
            on: { click: () => this.cb.onOnly(r.run) },
          }),
        ]);
      }),
    );
  }
}
