/**
 * The controller: owns the view state (runs shown, metric, step range,
 * cursor, open layer), asks the Api for what is shown, drops stale answers,
 * and batches redraws into one animation frame.
 */
import { Api, HttpError, isAbort, Latest } from "./api";
import { buildPalette, computeScale, metricInfo } from "./colormap";
import { el, setChildren } from "./dom";
import { rowHeightFor } from "./layout";
import { StateTable, STATE_HEALTHY, STATE_UNKNOWN } from "./states";
import { CSS } from "./styles";
import type { EventList, Heatmap, LayerSeries, Meta, NdEvent, RunInfo, StepRange } from "./types";
import { clampRange, isFull, panRange, unionRange, windowAround, zoomRange } from "./viewport";
import { Toolbar, RunList } from "./views/controls";
import { detailSeriesOrder, DetailView, seriesChoices } from "./views/detail";
import { EventListView } from "./views/eventList";
import { HeatmapPanel, type CellRef } from "./views/heatmapPanel";
import { Legend } from "./views/legend";
import { RootCausePanel } from "./views/rootCause";

export type ViewState = "loading" | "ready" | "empty" | "error";

/** The layer route refuses more points than this (docs/API.md). */
const LAYER_MAX_POINTS = 100000;
const REQUERY_DELAY_MS = 60;

export class App {
  readonly root: HTMLElement;
  private readonly toolbar: Toolbar;
  private readonly runList: RunList;
  private readonly legend = new Legend();
  private readonly rootPanel: RootCausePanel;
  private readonly eventList: EventListView;
  private readonly detail: DetailView;
  private readonly panelsEl = el("div", { class: "nd-panels" });
  private readonly body: HTMLElement;
  private readonly screen = el("div", { class: "nd-state-screen" });
  private readonly banner = el("div", { class: "nd-banner", attrs: { role: "status" } });

  private runs: RunInfo[] = [];
  private selected: string[] = [];
  private primary: string | null = null;
  private metric = "grad_norm";
  /** null = every step (and follow new ones on reload). */
  private range: StepRange | null = null;
  private readonly metas = new Map<string, Meta>();
  private readonly heatmaps = new Map<string, Heatmap>();
  private readonly eventLists = new Map<string, EventList>();
  private readonly panels = new Map<string, HeatmapPanel>();
  private cursor: { run: string; cell: CellRef } | null = null;
  private detailRef: { run: string; layer: string; step: number } | null = null;
  /** The step range the open layer detail was fetched for (series added later use it too). */
  private detailRange: StepRange | null = null;
  private readonly slots = new Map<string, Latest>();
  private frame = 0;
  private requeryTimer: ReturnType<typeof setTimeout> | undefined;
  private lastWidth = 0;

  constructor(host: HTMLElement, private readonly api: Api) {
    this.toolbar = new Toolbar({
      onMetric: (m) => this.setMetric(m),
      onZoom: (f) => this.zoom(f, null),
      onPan: (frac) => {
        const r = this.viewRange();
        if (r) this.pan(Math.round((r.end - r.start + 1) * frac));
      },
      onFit: () => this.setRange(null),
    });
    this.runList = new RunList({
      onOnly: (run) => this.select([run]),
      onToggle: (run, on) => this.select(on ? [...this.selected, run] : this.selected.filter((r) => r !== run)),
    });
    this.rootPanel = new RootCausePanel((run) => this.jumpToRootCause(run));
    this.eventList = new EventListView({
      onHover: (ev) => this.pointAt(ev),
      onClick: (ev) => this.goToEvent(ev),
    });
    this.detail = new DetailView({
      onClose: () => this.closeDetail(),
      onEvent: (ev) => this.goToEvent(ev),
      onNeedSeries: (m) => void this.loadDetailSeries(m),
    });
    this.banner.style.display = "none";
    this.body = el("div", { class: "nd-body" }, [
      el("aside", { class: "nd-sidebar" }, [this.runList.element, this.legend.element]),
      el("main", { class: "nd-main" }, [this.banner, this.rootPanel.element, this.panelsEl, this.detail.element]),
      this.eventList.element,
    ]);
    this.root = el("div", { class: "nd-root", attrs: { "data-state": "loading" } }, [
      el("style", { text: CSS }),
      this.toolbar.element,
      this.screen,
      this.body,
    ]);
    host.append(this.root);
    this.setState("loading");
    new ResizeObserver(() => this.onResize()).observe(this.panelsEl);
    window.addEventListener("keydown", (e) => {
      if (e.key === "Escape") this.closeDetail();
    });
  }

  /** First load, and every TensorBoard reload: refetch, keep zoom and selection. */
  async reload(): Promise<void> {
    const { token, signal } = this.slot("runs").start();
    let runs: RunInfo[];
    try {
      runs = await this.api.runs(signal);
    } catch (e) {
      if (!isAbort(e) && this.slot("runs").isCurrent(token)) this.fail(e);
      return;
    }
    if (!this.slot("runs").isCurrent(token)) return;
    this.runs = runs;
    if (runs.length === 0) {
      this.selected = [];
      this.syncPanels();
      this.setState("empty");
      return;
    }
    const names = new Set(runs.map((r) => r.run));
    let selected = this.selected.filter((r) => names.has(r));
    if (selected.length === 0) {
      // Open on the run that needs attention: the first failing one.
      selected = [(runs.find((r) => r.status === "failing") ?? runs[0]).run];
    }
    this.selected = selected;
    if (!this.primary || !selected.includes(this.primary)) this.primary = selected[0];
    this.runList.update(this.runs, this.selected);
    this.syncPanels();
    if (this.root.getAttribute("data-state") !== "ready") this.setState("loading");
    await Promise.all(this.selected.map((run) => this.loadRun(run)));
    if (this.detailRef) void this.openDetail(this.detailRef.run, this.detailRef.layer, this.detailRef.step, false);
  }

  // ---- state changes -------------------------------------------------------

  private select(runs: string[]): void {
    const valid = runs.filter((r, i) => runs.indexOf(r) === i && this.runs.some((x) => x.run === r));
    if (valid.length === 0) return this.runList.update(this.runs, this.selected);
    this.selected = valid;
    if (!this.primary || !valid.includes(this.primary)) this.primary = valid[0];
    if (this.detailRef && !valid.includes(this.detailRef.run)) this.closeDetail();
    this.runList.update(this.runs, this.selected);
    this.syncPanels();
    for (const run of valid) {
      if (this.metas.has(run)) this.fetchHeatmap(run);
      else void this.loadRun(run);
    }
    this.invalidate();
  }

  private setMetric(metric: string): void {
    this.metric = metric;
    this.toolbar.setMetric(metric);
    for (const run of this.selected) this.fetchHeatmap(run);
    if (this.detailRef) void this.openDetail(this.detailRef.run, this.detailRef.layer, this.detailRef.step, false);
  }

  private setRange(r: StepRange | null): void {
    const b = this.bounds();
    this.range = r && b && !isFull(r, b) ? clampRange(r, b) : null;
    this.toolbar.setRange(this.viewRange(), this.range !== null);
    this.eventList.sync(this.viewRange(), this.selectedLayer());
    clearTimeout(this.requeryTimer);
    this.requeryTimer = setTimeout(() => this.selected.forEach((run) => this.fetchHeatmap(run)), REQUERY_DELAY_MS);
  }

  private zoom(factor: number, anchor: number | null): void {
    const r = this.viewRange();
    const b = this.bounds();
    if (!r || !b) return;
    this.setRange(zoomRange(r, factor, anchor ?? (r.start + r.end) / 2, b));
  }

  private pan(delta: number): void {
    const r = this.viewRange();
    const b = this.bounds();
    if (r && b) this.setRange(panRange(r, delta, b));
  }

  private setCursor(run: string, cell: CellRef | null): void {
    this.cursor = cell ? { run, cell } : null;
    for (const [name, p] of this.panels) p.setCursor(name === run ? cell : null);
    this.eventList.sync(this.viewRange(), this.selectedLayer());
  }

  private selectedLayer(): string | null {
    return this.detailRef?.layer ?? this.cursor?.cell.layer ?? null;
  }

  /** Show a step: keep the zoom level, move the window only if the step is off screen. */
  private reveal(step: number, span?: number): void {
    const r = this.viewRange();
    const b = this.bounds();
    if (!r || !b) return;
    if (span !== undefined) this.setRange(windowAround(step, span, b));
    else if (step < r.start || step > r.end) this.setRange(windowAround(step, r.end - r.start, b));
  }

  private jumpToRootCause(run: string): void {
    const rc = this.runs.find((r) => r.run === run)?.root_cause;
    const b = this.bounds();
    if (!rc || !b) return;
    this.primary = run;
    const full = b.end - b.start;
    this.reveal(rc.step, Math.min(full, Math.max(24, Math.round(full * 0.25))));
    // The onset ring already marks the cell: the cursor goes there, no extra pointer.
    const cell = { layer: rc.layer, step: rc.step };
    this.setCursor(run, cell);
    this.panels.get(run)?.pointAt(null);
    void this.openDetail(run, rc.layer, rc.step, true);
    this.panels.get(run)?.focus();
    this.invalidate();
  }

  private goToEvent(ev: NdEvent): void {
    const run = this.primary;
    if (!run) return;
    this.reveal(ev.step);
    const cell = { layer: ev.layer, step: ev.step };
    this.setCursor(run, cell);
    this.panels.get(run)?.pointAt(cell);
    void this.openDetail(run, ev.layer, ev.step, true);
  }

  private pointAt(ev: NdEvent | null): void {
    const p = this.primary ? this.panels.get(this.primary) : undefined;
    p?.pointAt(ev ? { layer: ev.layer, step: ev.step } : null);
  }

  private closeDetail(): void {
    this.detailRef = null;
    this.detailRange = null;
    this.slot("detail").cancel();
    this.slot("detail-series").cancel();
    this.detail.hide();
    this.eventList.sync(this.viewRange(), this.selectedLayer());
  }

  // ---- data ----------------------------------------------------------------

  private slot(key: string): Latest {
    let s = this.slots.get(key);
    if (!s) this.slots.set(key, (s = new Latest()));
    return s;
  }

  private async loadRun(run: string): Promise<void> {
    const m = this.slot(`meta:${run}`).start();
    const ev = this.slot(`events:${run}`).start();
    try {
      const [meta, events] = await Promise.all([this.api.meta(run, m.signal), this.api.events(run, 1000, ev.signal)]);
      if (!this.slot(`meta:${run}`).isCurrent(m.token) || !this.slot(`events:${run}`).isCurrent(ev.token)) return;
      this.metas.set(run, meta);
      this.eventLists.set(run, events);
      if (this.range) this.range = clampRange(this.range, this.bounds()!);
      await this.fetchHeatmap(run);
    } catch (e) {
      if (!isAbort(e)) this.fail(e);
    }
  }

  private async fetchHeatmap(run: string): Promise<void> {
    const meta = this.metas.get(run);
    const panel = this.panels.get(run);
    if (!meta || !panel) return;
    const slot = this.slot(`heatmap:${run}`);
    const { token, signal } = slot.start();
    let range: StepRange | null = null;
    if (this.range) {
      range = { start: Math.max(this.range.start, meta.first_step), end: Math.min(this.range.end, meta.last_step) };
      if (range.start > range.end) {
        this.heatmaps.set(run, emptyHeatmap(run, this.metric, meta));
        this.invalidate();
        return;
      }
    }
    panel.setRows(meta.layers.map((l) => l.name));
    panel.setBusy(true);
    try {
      const hm = await this.api.heatmap(run, this.metric, range, panel.plotWidth(), signal);
      if (!slot.isCurrent(token)) return;
      this.heatmaps.set(run, hm);
      this.invalidate();
    } catch (e) {
      if (!isAbort(e) && slot.isCurrent(token)) this.fail(e);
    } finally {
      if (slot.isCurrent(token)) panel.setBusy(false);
    }
  }

  private async openDetail(run: string, layer: string, step: number, scroll: boolean): Promise<void> {
    const meta = this.metas.get(run);
    if (!meta) return;
    this.detailRef = { run, layer, step };
    this.eventList.sync(this.viewRange(), layer);
    const slot = this.slot("detail");
    const { token, signal } = slot.start();
    this.slot("detail-series").cancel();
    if (this.detail.element.getAttribute("data-layer") !== layer || this.detail.element.style.display === "none") {
      this.detail.loading(run, layer);
    }
    if (scroll) this.detail.element.scrollIntoView({ block: "nearest" });
    let r: StepRange = this.viewRange() ?? { start: meta.first_step, end: meta.last_step };
    r = { start: Math.max(r.start, meta.first_step), end: Math.min(r.end, meta.last_step) };
    if (r.end - r.start + 1 > LAYER_MAX_POINTS) r = windowAround(step, LAYER_MAX_POINTS - 1, r);
    this.detailRange = r;
    // Only the series shown: each metric asked costs a read of the whole run.
    const type = meta.layers.find((l) => l.name === layer)?.type ?? "";
    const order = detailSeriesOrder(type, this.metric, meta.metrics);
    if (order.length === 0) order.push(...meta.metrics.slice(0, 1));
    const hasData = (s: LayerSeries, m: string) => s.metrics[m]?.some((v) => Number.isFinite(v)) ?? false;
    try {
      let series = await this.api.layer(run, layer, r, order.slice(0, 1), signal);
      // A row without the first choice (a ReLU has no gradient norm): up to two fallbacks.
      for (let k = 1; k < Math.min(3, order.length) && slot.isCurrent(token) && !hasData(series, order[k - 1]); k++) {
        const more = await this.api.layer(run, layer, r, [order[k]], signal);
        const same = more.steps.length === series.steps.length && more.steps.every((v, i) => v === series.steps[i]);
        series = same ? { ...series, metrics: { ...series.metrics, ...more.metrics } } : more;
      }
      if (!slot.isCurrent(token)) return;
      this.detail.show(series, this.metric, new StateTable(meta.states), seriesChoices(type, meta.metrics));
    } catch (e) {
      if (isAbort(e) || !slot.isCurrent(token)) return;
      this.detail.error(layer, e instanceof Error ? e.message : String(e));
    }
  }

  /** The user picked a detail series that was not fetched: fetch just that one. */
  private async loadDetailSeries(metric: string): Promise<void> {
    const ref = this.detailRef;
    const r = this.detailRange;
    if (!ref || !r) return;
    const slot = this.slot("detail-series");
    const { token, signal } = slot.start();
    try {
      const part = await this.api.layer(ref.run, ref.layer, r, [metric], signal);
      if (slot.isCurrent(token)) this.detail.addSeries(part);
    } catch (e) {
      if (isAbort(e) || !slot.isCurrent(token)) this.detail.seriesDropped(metric);
      else this.detail.seriesDropped(metric, e instanceof Error ? e.message : String(e));
    }
  }

  // ---- drawing -------------------------------------------------------------

  private bounds(): StepRange | null {
    return unionRange(
      this.selected
        .map((r) => this.metas.get(r))
        .filter((m): m is Meta => !!m && m.num_steps > 0)
        .map((m) => ({ start: m.first_step, end: m.last_step })),
    );
  }

  private viewRange(): StepRange | null {
    return this.range ?? this.bounds();
  }

  /** Create/remove/reorder one panel per selected run. */
  private syncPanels(): void {
    for (const [run, p] of this.panels) {
      if (!this.selected.includes(run)) {
        p.element.remove();
        this.panels.delete(run);
      }
    }
    const cb = {
      onZoom: (_run: string, f: number, anchor: number) => this.zoom(f, anchor),
      onPan: (_run: string, d: number) => this.pan(d),
      onSelect: (run: string, cell: CellRef) => {
        this.primary = run;
        void this.openDetail(run, cell.layer, cell.step, true);
        this.invalidate();
      },
      onCursor: (run: string, cell: CellRef) => this.setCursor(run, cell),
      onEscape: () => this.closeDetail(),
    };
    const els = this.selected.map((run) => {
      let p = this.panels.get(run);
      if (!p) this.panels.set(run, (p = new HeatmapPanel(run, cb)));
      return p.element;
    });
    setChildren(this.panelsEl, els);
  }

  private invalidate(): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.draw();
    });
  }

  private draw(): void {
    const info = metricInfo(this.metric);
    const shown = this.selected
      .map((run) => ({ run, meta: this.metas.get(run), hm: this.heatmaps.get(run) }))
      .filter((x): x is { run: string; meta: Meta; hm: Heatmap } => !!x.meta && !!x.hm && x.hm.metric === this.metric);
    const scale = computeScale(info.kind, shown.map((x) => x.hm));
    const primaryMeta = this.primary ? this.metas.get(this.primary) : undefined;
    const stateTable = new StateTable(primaryMeta?.states ?? shown[0]?.meta.states ?? []);
    const palette = buildPalette(stateTable.states);
    const maxRows = Math.max(1, ...shown.map((x) => x.hm.rows));
    const avail = Math.max(220, Math.min(640, window.innerHeight - 330));
    const rowHeight = rowHeightFor(maxRows, avail);
    const present = new Set<number>();
    for (const { run, meta, hm } of shown) {
      for (const s of hm.states) if (s !== STATE_HEALTHY && s !== STATE_UNKNOWN) present.add(s);
      const p = this.panels.get(run)!;
      p.setPrimary(this.selected.length > 1 && run === this.primary);
      p.update({
        info: this.runs.find((r) => r.run === run)!,
        meta,
        heatmap: hm,
        scale,
        palette,
        states: new StateTable(meta.states),
        metric: info,
        events: this.eventLists.get(run)?.events ?? [],
        rowHeight,
      });
    }
    this.legend.update(info, scale, stateTable, present);
    const primaryInfo = this.runs.find((r) => r.run === this.primary) ?? null;
    this.rootPanel.update(primaryInfo, this.selected.length);
    this.eventList.update(this.primary, this.primary ? this.eventLists.get(this.primary) ?? null : null, primaryInfo?.root_cause ?? null);
    this.eventList.sync(this.viewRange(), this.selectedLayer());
    this.toolbar.setRange(this.viewRange(), this.range !== null);
    const complete = this.selected.length > 0 && this.selected.every((r) => this.heatmaps.has(r) && this.metas.has(r));
    if (complete) this.setState("ready");
  }

  private onResize(): void {
    const w = this.panelsEl.clientWidth;
    if (Math.abs(w - this.lastWidth) < 8) return;
    this.lastWidth = w;
    clearTimeout(this.requeryTimer);
    this.requeryTimer = setTimeout(() => {
      this.selected.forEach((run) => this.fetchHeatmap(run));
      this.detail.draw();
    }, 150);
  }

  // ---- page states ---------------------------------------------------------

  private setState(state: ViewState, error?: string): void {
    this.root.setAttribute("data-state", state);
    const status = this.toolbar.status;
    status.replaceChildren();
    this.banner.style.display = "none";
    if (state === "loading") status.append(el("span", { class: "nd-spinner" }), "Loading…");
    if (state === "ready") {
      const n = this.runs.length;
      status.textContent = `${n} run${n === 1 ? "" : "s"} with NeuralDbg data`;
    }
    this.body.style.display = state === "empty" || state === "error" ? "none" : "";
    this.screen.style.display = state === "empty" || state === "error" ? "" : "none";
    if (state === "empty") {
      setChildren(this.screen, [
        el("h1", { text: "No NeuralDbg data yet" }),
        el("p", { text: "None of the runs in this logdir has NeuralDbg data. Record some with:" }),
        el("pre", {
          text: 'from tb_neuraldbg import DebugWriter\n\nwriter = DebugWriter("runs/exp1")\nwriter.watch(model, optimizer=opt, criterion=loss_fn)\n# ... train as usual ...\nwriter.close()',
        }),
        el("p", { text: "Runs appear here on TensorBoard's next reload." }),
      ]);
    } else if (state === "error") {
      setChildren(this.screen, [
        el("h1", { text: "Could not load NeuralDbg data" }),
        el("p", { text: error ?? "" }),
        el("button", { class: "nd-btn", text: "Retry", attrs: { type: "button" }, on: { click: () => void this.reload() } }),
      ]);
    }
  }

  /** A failed request: the error screen before anything is shown, a banner after. */
  private fail(e: unknown): void {
    const msg = e instanceof HttpError ? e.message : e instanceof Error ? e.message : String(e);
    if (this.root.getAttribute("data-state") === "ready") {
      this.banner.textContent = `Reload failed: ${msg}`;
      this.banner.style.display = "";
    } else {
      this.setState("error", msg);
    }
  }
}

function emptyHeatmap(run: string, metric: string, meta: Meta): Heatmap {
  const layers = meta.layers.map((l) => l.name);
  return { run, metric, rows: layers.length, cols: 0, layers, colStart: [], colEnd: [], values: new Float32Array(0), states: new Uint8Array(0) };
}
