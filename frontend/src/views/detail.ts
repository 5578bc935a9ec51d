/**
 * Layer detail: the clicked layer's series at full resolution as a small
 * canvas line chart, a strip of its per-step states, its events as markers
 * and as a list.
 */
import { el, setChildren, swatch } from "../dom";
import { formatSteps, formatValue, humanize } from "../format";
import { chartScale, segments, xPixel, yPixel, type ChartBox } from "../linechart";
import { METRIC_MENU, type MetricTable } from "../metrics";
import { STATE_HEALTHY, STATE_UNKNOWN } from "../states";
import { CLASS } from "../styles";
import type { Tables } from "../tables";
import type { LayerSeries, NdEvent } from "../types";

/** Metrics of the layer that have at least one finite value: the menu's first, then the rest. */
export function seriesWithData(s: LayerSeries): string[] {
  const has = (m: string) => s.metrics[m]?.some((v) => Number.isFinite(v)) ?? false;
  const menu = METRIC_MENU.filter(has);
  return [...menu, ...Object.keys(s.metrics).filter((m) => !menu.includes(m) && has(m))];
}

/** What a series is called for this kind of row ("value" is the loss or the learning rate). */
export function seriesLabel(layerType: string, metric: string, metrics: MetricTable): string {
  if (metric === "value" && layerType === "loss") return "Loss";
  if (metric === "value" && layerType === "optimizer") return "Learning rate";
  if (metric === "scale" && layerType === "optimizer") return "AMP loss scale";
  return metrics.info(metric).label;
}

/** The series to draw first: the heatmap's metric when this layer has it, else the first with data. */
export function pickSeries(s: LayerSeries, metric: string): string {
  const avail = seriesWithData(s);
  return avail.includes(metric) ? metric : (avail[0] ?? metric);
}

/** Metrics that only the <loss>/<optimizer> rows have. */
const PSEUDO_SERIES = ["value", "scale"];

/** The series a row of this type can have (the detail's menu), menu metrics first. */
export function seriesChoices(layerType: string, metrics: readonly string[]): string[] {
  if (layerType === "loss") return metrics.filter((m) => m === "value");
  if (layerType === "optimizer") return metrics.filter((m) => PSEUDO_SERIES.includes(m));
  const menu = METRIC_MENU.filter((m) => metrics.includes(m));
  return [...menu, ...metrics.filter((m) => !menu.includes(m) && !PSEUDO_SERIES.includes(m))];
}

/**
 * What the detail asks the layer route for, in order: the heatmap's metric
 * when the row can have it (the heatmap route already cached it, so it costs
 * nothing), else the row's usual series; then fallbacks, asked one at a time
 * only while the answer has no data (a ReLU has no gradient norm). Each metric
 * costs a read of the whole run at scale, so never all of them.
 */
export function detailSeriesOrder(layerType: string, heatmapMetric: string, metrics: readonly string[]): string[] {
  const choices = seriesChoices(layerType, metrics);
  const wanted = [heatmapMetric, layerType === "input" ? "act_std" : "grad_norm", "act_std", ...choices];
  return wanted.filter((m, i) => choices.includes(m) && wanted.indexOf(m) === i);
}

export interface DetailCallbacks {
  onClose(): void;
  onEvent(ev: NdEvent): void;
  /** The user picked a series that is not loaded yet: fetch it and call addSeries(). */
  onNeedSeries(metric: string): void;
}

export class DetailView {
  readonly element: HTMLElement;
  private readonly head = el("div", { class: "nd-detail-head" });
  private readonly body = el("div");
  private readonly canvas = el("canvas", { class: "nd-chart", attrs: { role: "img" } });
  private readonly events = el("ul", { class: "nd-detail-events" });
  private readonly note = el("div", { class: CLASS.note, attrs: { role: "status" } });
  private series: LayerSeries | null = null;
  private tables: Tables | null = null;
  private metric = "grad_norm";
  /** Menu of the open layer (seriesChoices); loaded ones without data are left out. */
  private choices: string[] = [];
  /** Series asked for (loaded or on their way) for the open layer. */
  private readonly requested = new Set<string>();

  constructor(private readonly cb: DetailCallbacks) {
    this.element = el("section", { class: CLASS.card, attrs: { "data-testid": "layer-detail", "aria-label": "Layer detail" } }, [
      this.head,
      this.body,
    ]);
    this.element.style.display = "none";
  }

  hide(): void {
    this.element.style.display = "none";
    this.series = null;
  }

  loading(run: string, layer: string): void {
    this.series = null;
    this.element.style.display = "";
    this.element.setAttribute("data-layer", layer);
    this.element.setAttribute("data-state", "loading");
    this.renderHead(layer, "", run);
    setChildren(this.body, [el("div", { class: CLASS.note }, [el("span", { class: CLASS.spinner }), "Loading layer…"])]);
  }

  error(layer: string, message: string): void {
    this.element.setAttribute("data-state", "error");
    this.renderHead(layer, "", "");
    setChildren(this.body, [el("div", { class: CLASS.note, text: message })]);
  }

  /**
   * Show a layer. `metric` is the series to draw when it has data; `choices`
   * the series the menu offers (fetched on demand through onNeedSeries).
   */
  show(series: LayerSeries, metric: string, tables: Tables, choices: readonly string[] = Object.keys(series.metrics)): void {
    this.series = series;
    this.tables = tables;
    this.choices = [...choices];
    this.requested.clear();
    for (const m of Object.keys(series.metrics)) this.requested.add(m);
    this.metric = pickSeries(series, metric);
    this.element.style.display = "";
    this.element.setAttribute("data-layer", series.layer);
    this.element.setAttribute("data-state", "ready");
    this.renderHead(series.layer, series.type, series.run);
    this.setNote("");
    setChildren(this.body, [this.note, this.canvas, this.events]);
    this.renderEvents();
    this.draw();
  }

  /** Series fetched after show() (same run, layer and steps): merged, drawn if shown. */
  addSeries(part: LayerSeries): void {
    const s = this.series;
    if (!s || part.run !== s.run || part.layer !== s.layer || part.steps.length !== s.steps.length ||
        part.steps.some((v, i) => v !== s.steps[i])) return;
    for (const [m, v] of Object.entries(part.metrics)) {
      s.metrics[m] = v;
      this.requested.add(m);
    }
    this.element.setAttribute("data-state", "ready");
    this.setNote("");
    this.renderHead(s.layer, s.type, s.run);
    this.draw();
  }

  /** The menu: loaded series with data, then those not loaded yet (the shown one always). */
  private menu(): string[] {
    const s = this.series;
    if (!s) return [];
    const withData = seriesWithData(s);
    const rest = this.choices.filter((m) => !withData.includes(m) && (!(m in s.metrics) || m === this.metric));
    return [...withData, ...rest];
  }

  private choose(metric: string): void {
    this.metric = metric;
    if (this.series && !this.requested.has(metric)) {
      this.requested.add(metric);
      this.element.setAttribute("data-state", "loading");
      this.setNote("");
      this.cb.onNeedSeries(metric);
    }
    this.draw();
  }

  /** A series fetch was aborted (message undefined) or failed: it may be asked again. */
  seriesDropped(metric: string, message?: string): void {
    this.requested.delete(metric);
    if (message === undefined || !this.series) return;
    this.element.setAttribute("data-state", "error");
    this.setNote(`Could not load ${this.label(this.series.type, metric)}: ${message}`);
  }

  private setNote(text: string): void {
    this.note.textContent = text;
    this.note.style.display = text ? "" : "none";
  }

  private renderHead(layer: string, type: string, run: string): void {
    const available = this.menu().map((id) => ({ id, label: this.label(type, id) }));
    const select = el(
      "select",
      { attrs: { "aria-label": "Detail metric" }, on: { change: () => this.choose(select.value) } },
      available.map((m) => el("option", { text: m.label, attrs: { value: m.id, selected: m.id === this.metric } })),
    );
    setChildren(this.head, [
      el("span", { class: "nd-detail-title", text: layer }),
      type ? el("span", { class: "nd-detail-sub", text: type }) : null,
      this.series && this.series.steps.length
        ? el("span", {
            class: "nd-detail-sub",
            text: `${formatSteps(this.series.steps[0], this.series.steps[this.series.steps.length - 1])} · ${run}`,
          })
        : null,
      el("span", { class: CLASS.spacer }),
      available.length ? el("label", { class: CLASS.field }, ["Series", select]) : null,
      el("button", { class: CLASS.btn, text: "Close", attrs: { type: "button", "aria-label": "Close layer detail" }, on: { click: () => this.cb.onClose() } }),
    ]);
  }

  private label(layerType: string, metric: string): string {
    return this.tables ? seriesLabel(layerType, metric, this.tables.metrics) : metric;
  }

  private renderEvents(): void {
    const evs = this.series!.events;
    const states = this.tables!.states;
    setChildren(
      this.events,
      evs.length
        ? evs.map((ev) =>
            el("li", {}, [
              swatch(states.colorOf(ev.to_state)),
              el("button", {
                class: CLASS.btn,
                text: `step ${ev.step}`,
                attrs: { type: "button" },
                on: { click: () => this.cb.onEvent(ev) },
              }),
              el("span", { text: `${humanize(ev.kind)}: ${ev.message}` }),
            ]),
          )
        : [el("li", { class: "nd-detail-sub", text: "No events for this layer in this range." })],
    );
  }

  /** Paint the chart (also called on resize). */
  draw(): void {
    const s = this.series;
    const tables = this.tables;
    if (!s || !tables || this.element.style.display === "none") return;
    const info = { ...tables.metrics.info(this.metric), label: seriesLabel(s.type, this.metric, tables.metrics) };
    const values = s.metrics[this.metric] ?? new Float64Array(s.steps.length).fill(NaN);
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(200, this.canvas.clientWidth || 600);
    const h = 180;
    this.canvas.width = Math.round(w * dpr);
    this.canvas.height = Math.round(h * dpr);
    this.canvas.setAttribute("aria-label", `${info.label} of ${s.layer} over ${s.steps.length} steps`);
    const ctx = this.canvas.getContext("2d");
    if (!ctx) return;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const box: ChartBox = { left: 56, top: 8, width: w - 66, height: h - 44 };
    const scale = chartScale(s.steps, values, info.kind === "log");
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#6b7280";
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    ctx.strokeStyle = "#eef0f3";
    ctx.lineWidth = 1;
    for (let k = 0; k <= 4; k++) {
      const yv = scale.y0 + ((scale.y1 - scale.y0) * k) / 4;
      const v = scale.log ? 10 ** yv : yv;
      const y = yPixel(scale, box, v);
      ctx.beginPath();
      ctx.moveTo(box.left, y);
      ctx.lineTo(box.left + box.width, y);
      ctx.stroke();
      ctx.fillText(formatValue(v), box.left - 6, y);
    }
    // Events: vertical markers in the colour of the state they lead to.
    for (const ev of s.events) {
      const x = xPixel(scale, box, ev.step);
      ctx.strokeStyle = tables.states.colorOf(ev.to_state);
      ctx.setLineDash([3, 3]);
      ctx.beginPath();
      ctx.moveTo(x, box.top);
      ctx.lineTo(x, box.top + box.height);
      ctx.stroke();
    }
    ctx.setLineDash([]);
    ctx.strokeStyle = "#2563eb";
    ctx.lineWidth = 1.5;
    for (const seg of segments(s.steps, values, scale, box)) {
      ctx.beginPath();
      ctx.moveTo(seg[0], seg[1]);
      for (let i = 2; i < seg.length; i += 2) ctx.lineTo(seg[i], seg[i + 1]);
      if (seg.length === 2) ctx.arc(seg[0], seg[1], 1.5, 0, 2 * Math.PI);
      ctx.stroke();
    }
    // State strip under the chart: one rect per run of equal state.
    const stripY = box.top + box.height + 6;
    let i = 0;
    while (i < s.steps.length) {
      let j = i + 1;
      while (j < s.steps.length && s.states[j] === s.states[i]) j++;
      const code = s.states[i];
      if (code !== STATE_UNKNOWN) {
        ctx.fillStyle = code === STATE_HEALTHY ? "#d1e7d8" : tables.states.color(code);
        const x0 = xPixel(scale, box, s.steps[i]);
        const x1 = j < s.steps.length ? xPixel(scale, box, s.steps[j]) : box.left + box.width;
        ctx.fillRect(x0, stripY, Math.max(1, x1 - x0), 6);
      }
      i = j;
    }
    ctx.fillStyle = "#6b7280";
    ctx.textAlign = "left";
    ctx.textBaseline = "top";
    ctx.fillText(String(scale.x0), box.left, stripY + 10);
    ctx.textAlign = "right";
    ctx.fillText(String(scale.x1), box.left + box.width, stripY + 10);
    ctx.textAlign = "center";
    ctx.fillText(`${info.label}${scale.log ? " (log)" : ""} · states below`, box.left + box.width / 2, stripY + 10);
  }
}
