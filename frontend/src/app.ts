/**
 * The controller: owns the view state (runs shown, metric, step range,
 * cursor, open layer, and how rows are shown: treestate.ts), asks the store
 * for what is shown (the store caches and drops stale answers), and batches
 * redraws into one animation frame.
 */
import { RunAlignment, type Aligned } from "./align";
import type { Api } from "./api";
import { buildPalette, computeScale } from "./colormap";
import { el, setChildren } from "./dom";
import { rowHeightFor } from "./layout";
import { RowModel } from "./rowmodel";
import type { RowView } from "./rowview";
import { STATE_HEALTHY, STATE_UNKNOWN } from "./states";
import { layerRange, Store } from "./store";
import { CLASS, CSS } from "./styles";
import { BUILTIN_TABLES } from "./tables";
import { ancestors, defaultExpansion, type ModuleTree } from "./tree";
import { TreeState, type RowOrder } from "./treestate";
import { ViewStore } from "./urlstate";
import { axisCols } from "./stepaxis";
import { warmUpDraw, WARM_CELLS } from "./warmup";
import type { Heatmap, Meta, NdEvent, RunInfo, StepRange } from "./types";
import { clampRange, isFull, panRange, unionRange, windowAround, zoomRange } from "./viewport";
import { Toolbar, RunList } from "./views/controls";
import { detailSeriesOrder, DetailView, seriesChoices } from "./views/detail";
import { EventListView } from "./views/eventList";
import { HeatmapPanel, type CellRef } from "./views/heatmapPanel";
import { Legend } from "./views/legend";
import { RootCausePanel } from "./views/rootCause";
import { RowControls } from "./views/rowControls";
import { StateScreen } from "./views/stateScreen";

export type ViewState = "loading" | "ready" | "empty" | "error";

const REQUERY_DELAY_MS = 60;
const NO_EVENTS: readonly NdEvent[] = [];

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
  private readonly screen = new StateScreen(() => void this.reload());
  private readonly banner = el("div", { class: "nd-banner", attrs: { role: "status" } });
  private readonly store: Store;
  private readonly rowControls: RowControls;
  private readonly views: ViewStore;
  /** How rows are shown: one state for every run (one model, one tree). */
  private readonly rows: TreeState;
  private readonly rowModels = new Map<string, RowModel>();
  /** The default expansion and what it was computed for. */
  private auto: { tree: ModuleTree; focus: string; set: Set<string> } | null = null;

  private selected: string[] = [];
  /** The runs the URL named at page load, until one of them is listed (a shared link). */
  private urlRuns: readonly string[];
  /** The rows of the runs shown side by side, aligned (null: one run shown). */
  private readonly alignment = new RunAlignment();
  private aligned: Aligned | null = null;
  private primary: string | null = null;
  private metric = "grad_norm";
  /** null = every step (and follow new ones on reload). */
  private range: StepRange | null = null;
  private readonly panels = new Map<string, HeatmapPanel>();
  private cursor: { run: string; cell: CellRef } | null = null;
  private detailRef: { run: string; layer: string; step: number } | null = null;
  /** The step range the open layer detail was fetched for (series added later use it too). */
  private detailRange: StepRange | null = null;
  private frame = 0;
  private requeryTimer: ReturnType<typeof setTimeout> | undefined;
  private lastWidth = 0;
  /** Whether the draw path was compiled ahead (warmup.ts): once a page. */
  private warmed = false;

  constructor(host: HTMLElement, api: Api, views: ViewStore = new ViewStore()) {
    this.store = new Store(api);
    this.views = views;
    this.rows = new TreeState(views.readExpansion());
    const url = views.readUrl();
    this.rows.setFilter(url.filter);
    this.rows.setOrder(url.order);
    this.urlRuns = url.runs ?? [];
    this.rowControls = new RowControls({
      onFilter: (text) => this.setRowView(() => this.rows.setFilter(text)),
      onOrder: (order) => this.setRowView(() => this.rows.setOrder(order)),
      onAll: (open) => this.setRowView(() => this.rows.setAll(open)),
    });
    this.rowControls.set(this.rows.filter, this.rows.order);
    this.toolbar = new Toolbar({
      onMetric: (m) => this.setMetric(m),
      onZoom: (f) => this.zoom(f, null),
      onPan: (frac) => {
        const r = this.viewRange();
        if (r) this.pan(Math.round((r.end - r.start + 1) * frac));
      },
      onFit: () => this.setRange(null),
    }, BUILTIN_TABLES.metrics);
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
      el("main", { class: "nd-main" }, [this.banner, this.rootPanel.element, this.rowControls.element, this.panelsEl, this.detail.element]),
      this.eventList.element,
    ]);
    this.root = el("div", { class: "nd-root", attrs: { "data-state": "loading" } }, [
      el("style", { text: CSS }),
      this.toolbar.element,
      this.screen.element,
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
    let runs: RunInfo[] | null;
    try {
      runs = await this.store.loadRuns();
    } catch (e) {
      this.fail(e);
      return;
    }
    if (!runs) return;
    if (runs.length === 0) {
      this.selected = [];
      this.syncPanels();
      this.setState("empty");
      return;
    }
    const names = new Set(runs.map((r) => r.run));
    let selected = (this.selected.length ? this.selected : this.urlRuns).filter((r) => names.has(r));
    // A link's runs not listed (yet): the link stays in the URL until they are.
    const keepUrl = selected.length === 0 && this.urlRuns.length > 0;
    if (selected.length === 0) {
      // Open on the run that needs attention: the first failing one.
      selected = [(runs.find((r) => r.status === "failing") ?? runs[0]).run];
    } else {
      this.urlRuns = [];
    }
    this.selected = selected;
    if (!keepUrl) this.saveRuns();
    if (!this.primary || !selected.includes(this.primary)) this.primary = selected[0];
    this.runList.update(runs, this.selected);
    this.syncPanels();
    if (this.root.getAttribute("data-state") !== "ready") this.setState("loading");
    await Promise.all(this.selected.map((run) => this.loadRun(run)));
    if (this.detailRef) void this.openDetail(this.detailRef.run, this.detailRef.layer, this.detailRef.step, false);
  }

  // ---- state changes -------------------------------------------------------

  private select(runs: string[]): void {
    const valid = runs.filter((r, i) => runs.indexOf(r) === i && this.store.runInfo(r) !== undefined);
    if (valid.length === 0) return this.runList.update(this.store.runs(), this.selected);
    this.selected = valid;
    this.urlRuns = [];
    this.saveRuns();
    if (!this.primary || !valid.includes(this.primary)) this.primary = valid[0];
    if (this.detailRef && !valid.includes(this.detailRef.run)) this.closeDetail();
    this.runList.update(this.store.runs(), this.selected);
    this.syncPanels();
    for (const run of valid) {
      if (this.store.meta(run)) void this.fetchHeatmap(run);
      else void this.loadRun(run);
    }
    this.invalidate();
  }

  /** The runs shown, into the URL (a shared link opens them). */
  private saveRuns(): void {
    this.views.writeUrl({ filter: this.rows.filter, order: this.rows.order as RowOrder, runs: this.selected });
  }

  /** The rows a run is drawn with: its own layers, or with other runs shown the aligned union (align.ts). */
  private layerNames(run: string, meta: Meta): readonly string[] {
    return this.aligned && this.aligned.heatmaps.has(run) ? this.aligned.names : meta.layers.map((l) => l.name);
  }

  /** The step axis the panels share when several runs are shown (stepaxis.ts), else null. */
  private sharedAxis(): StepRange | null {
    return this.selected.length > 1 ? this.viewRange() : null;
  }

  /** A change of filter, order or expansion: save it, redraw. */
  private setRowView(change: () => void): void {
    const before = this.rows.version;
    change();
    if (this.rows.version === before) return;
    this.rowControls.set(this.rows.filter, this.rows.order);
    this.views.writeUrl({ filter: this.rows.filter, order: this.rows.order as RowOrder });
    this.views.writeExpansion(this.rows.saved());
    this.invalidate();
  }

  /** Expand the groups above a layer (or a group) of a run, so that its own row shows. */
  private revealLayer(run: string, layer: string): void {
    const meta = this.store.meta(run);
    if (!meta) return;
    const tree = this.rowModel(run).tree(this.layerNames(run, meta));
    const n = tree.byId.get(layer);
    if (n === undefined) return;
    const ids = ancestors(tree, n).map((a) => tree.nodes[a].id);
    this.setRowView(() => this.rows.reveal(ids, this.autoExpansion()));
  }

  private rowModel(run: string): RowModel {
    let m = this.rowModels.get(run);
    if (!m) this.rowModels.set(run, (m = new RowModel()));
    return m;
  }

  /**
   * The default expansion: the root causes' branches of the runs shown (so
   * compared runs of one model keep their rows aligned), then what fits,
   * over the primary run's tree.
   */
  private autoExpansion(): Set<string> {
    const run = this.primary;
    const meta = run ? this.store.meta(run) : undefined;
    if (!run || !meta) return new Set();
    const tree = this.rowModel(run).tree(this.layerNames(run, meta));
    const focus = this.selected.map((r) => this.store.runInfo(r)?.root_cause?.layer).filter((l): l is string => !!l);
    // The other failing layers, in onset order (events come sorted by step).
    const also = this.selected
      .flatMap((r) => this.store.events(r)?.events ?? [])
      .filter((e) => e.severity !== "info")
      .sort((a, b) => a.step - b.step)
      .map((e) => e.layer);
    const key = JSON.stringify([focus, [...new Set(also)]]);
    if (!this.auto || this.auto.tree !== tree || this.auto.focus !== key) {
      this.auto = { tree, focus: key, set: defaultExpansion(tree, focus, [...new Set(also)]) };
    }
    return this.auto.set;
  }

  private setMetric(metric: string): void {
    this.metric = metric;
    this.toolbar.setMetric(metric);
    for (const run of this.selected) void this.fetchHeatmap(run);
    if (this.detailRef) void this.openDetail(this.detailRef.run, this.detailRef.layer, this.detailRef.step, false);
  }

  private setRange(r: StepRange | null): void {
    const b = this.bounds();
    this.range = r && b && !isFull(r, b) ? clampRange(r, b) : null;
    this.toolbar.setRange(this.viewRange(), this.range !== null);
    this.eventList.sync(this.viewRange(), this.selectedLayer());
    clearTimeout(this.requeryTimer);
    this.requeryTimer = setTimeout(() => this.selected.forEach((run) => void this.fetchHeatmap(run)), REQUERY_DELAY_MS);
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
    const rc = this.store.runInfo(run)?.root_cause;
    const b = this.bounds();
    if (!rc || !b) return;
    this.primary = run;
    this.revealLayer(run, rc.layer);
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
    this.revealLayer(run, ev.layer);
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
    this.store.cancelLayer();
    this.detail.hide();
    this.eventList.sync(this.viewRange(), this.selectedLayer());
  }

  // ---- data ----------------------------------------------------------------

  private async loadRun(run: string): Promise<void> {
    const axis = this.sharedAxis();
    try {
      if (!(await this.store.loadRun(run))) return;
    } catch (e) {
      this.fail(e);
      return;
    }
    if (this.range) this.range = clampRange(this.range, this.bounds()!);
    // A run that widens the shared axis narrows the others' part of it: they are asked again for fewer columns.
    const now = this.sharedAxis();
    if (now && (!axis || axis.start !== now.start || axis.end !== now.end)) {
      for (const other of this.selected) if (other !== run) void this.fetchHeatmap(other);
    }
    await this.fetchHeatmap(run);
  }

  private async fetchHeatmap(run: string): Promise<void> {
    const meta = this.store.meta(run);
    const panel = this.panels.get(run);
    if (!meta || !panel) return;
    panel.setRows(this.rowModel(run).tree(this.layerNames(run, meta)));
    panel.setBusy(true);
    const axis = this.sharedAxis();
    // On a shared axis a run covers only its own steps of the width: as many columns as those pixels.
    const cols = axis && meta.num_steps > 0 ? axisCols(panel.plotWidth(), { start: meta.first_step, end: meta.last_step }, axis) : panel.plotWidth();
    try {
      const answer = this.store.loadHeatmap(run, this.metric, this.range, cols);
      // A big first heatmap: compile the draw path while the server bins it.
      if (!this.warmed && meta.layers.length * Math.min(meta.num_steps, panel.plotWidth()) >= WARM_CELLS) {
        this.warmed = true;
        const states = this.store.tables(run).states;
        this.root.setAttribute("data-warmup-ms", warmUpDraw(states, buildPalette(states)).toFixed(1));
      }
      // null: a newer request of this run superseded it (and owns the busy flag).
      if (!(await answer)) return;
    } catch (e) {
      panel.setBusy(false);
      this.fail(e);
      return;
    }
    panel.setBusy(false);
    this.invalidate();
  }

  private async openDetail(run: string, layer: string, step: number, scroll: boolean): Promise<void> {
    const meta = this.store.meta(run);
    if (!meta) return;
    this.detailRef = { run, layer, step };
    this.eventList.sync(this.viewRange(), layer);
    if (this.detail.element.getAttribute("data-layer") !== layer || this.detail.element.style.display === "none") {
      this.detail.loading(run, layer);
    }
    if (scroll) this.detail.element.scrollIntoView({ block: "nearest" });
    const r = layerRange(meta, this.viewRange(), step);
    this.detailRange = r;
    // Only the series shown: each metric asked costs a read of the whole run.
    const type = meta.layers.find((l) => l.name === layer)?.type ?? "";
    const order = detailSeriesOrder(type, this.metric, meta.metrics);
    if (order.length === 0) order.push(...meta.metrics.slice(0, 1));
    const tables = this.store.tables(run);
    try {
      const series = await this.store.loadLayer(run, layer, r, order);
      if (series) this.detail.show(series, this.metric, tables, seriesChoices(type, meta.metrics));
    } catch (e) {
      this.detail.error(layer, errorText(e));
    }
  }

  /** The user picked a detail series that was not fetched: fetch just that one. */
  private async loadDetailSeries(metric: string): Promise<void> {
    const ref = this.detailRef;
    const r = this.detailRange;
    if (!ref || !r) return;
    try {
      const part = await this.store.loadSeries(ref.run, ref.layer, r, metric);
      if (part) this.detail.addSeries(part);
      else this.detail.seriesDropped(metric);
    } catch (e) {
      this.detail.seriesDropped(metric, errorText(e));
    }
  }

  // ---- drawing -------------------------------------------------------------

  private bounds(): StepRange | null {
    return unionRange(
      this.selected
        .map((r) => this.store.meta(r))
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
        this.rowModels.delete(run);
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
      onToggle: (run: string, id: string, open: boolean, then?: CellRef) => {
        // Opening a group pins the path to it: it stays in sight in another run, whose default differs.
        if (open) this.revealLayer(run, id);
        this.setRowView(() => this.rows.toggle(id, open));
        if (then) this.setCursor(run, then);
      },
      onEscape: () => this.closeDetail(),
      onHover: (run: string, cell: CellRef | null) => {
        for (const [name, p] of this.panels) p.echo(name === run ? null : cell);
      },
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
    const store = this.store;
    const shown = this.selected
      .map((run) => ({ run, meta: store.meta(run), hm: store.heatmap(run) }))
      .filter((x): x is { run: string; meta: Meta; hm: Heatmap } => !!x.meta && !!x.hm && x.hm.metric === this.metric);
    // One server, one set of tables: those of the primary run (the built-in ones before any meta).
    const tables = store.tables(this.primary && store.meta(this.primary) ? this.primary : (shown[0]?.run ?? null));
    const info = tables.metrics.info(this.metric);
    const scale = computeScale(info.kind, shown.map((x) => x.hm));
    const palette = buildPalette(tables.states);
    // Several runs: every panel draws the same rows in the same order (align.ts) on one step axis.
    const axis = this.sharedAxis();
    this.aligned = axis
      ? this.alignment.align(
          shown.map(({ run, hm }) => ({ run, heatmap: hm, events: store.events(run)?.events ?? NO_EVENTS, rootCause: store.runInfo(run)?.root_cause ?? null })),
          tables.states.ranks(),
        )
      : null;
    const aligned = this.aligned;
    const auto = this.autoExpansion();
    const views = shown.map(({ run, meta, hm }): RowView =>
      this.rowModel(run).view({
        heatmap: aligned?.heatmaps.get(run) ?? hm,
        // Always a key (undefined alone): the row model's memo must see the shared order go.
        order: aligned && this.rows.order === "onset" ? aligned.order() : undefined,
        meta,
        events: store.events(run)?.events ?? NO_EVENTS,
        rootCause: store.runInfo(run)?.root_cause ?? null,
        states: store.tables(run).states,
        kind: info.kind,
        state: this.rows,
        auto,
      }),
    );
    const maxRows = Math.max(1, ...views.map((v) => v.rows));
    const avail = Math.max(220, Math.min(640, window.innerHeight - 330));
    const rowHeight = rowHeightFor(maxRows, avail);
    const present = new Set<number>();
    shown.forEach(({ run, meta, hm }, k) => {
      for (const s of hm.states) if (s !== STATE_HEALTHY && s !== STATE_UNKNOWN) present.add(s);
      const p = this.panels.get(run)!;
      p.setPrimary(this.selected.length > 1 && run === this.primary);
      p.setAxis(axis);
      p.update({
        info: store.runInfo(run)!,
        meta,
        view: views[k],
        scale,
        palette,
        states: store.tables(run).states,
        metric: info,
        events: store.events(run)?.events ?? NO_EVENTS,
        rowHeight,
      });
    });
    const pv = views[shown.findIndex((x) => x.run === this.primary)] ?? views[0];
    if (pv) {
      const kept = this.rows.filter.trim() ? pv.rowOfLayer.reduce((n, r) => n + (r >= 0 ? 1 : 0), 0) : null;
      this.rowControls.setCounts(pv.rows, pv.heatmap.rows, kept, pv.tree.nodes.some((n) => n.children.length > 0));
    }
    this.legend.update(info, scale, tables.states, present);
    this.toolbar.setMetricTable(tables.metrics);
    const primaryInfo = store.runInfo(this.primary) ?? null;
    this.rootPanel.update(primaryInfo, this.selected.length);
    this.eventList.update(this.primary, this.primary ? store.events(this.primary) ?? null : null, primaryInfo?.root_cause ?? null, tables.states, this.selected.length);
    this.eventList.sync(this.viewRange(), this.selectedLayer());
    this.toolbar.setRange(this.viewRange(), this.range !== null);
    const complete = this.selected.length > 0 && this.selected.every((r) => store.heatmap(r) && store.meta(r));
    if (complete) this.setState("ready");
  }

  private onResize(): void {
    const w = this.panelsEl.clientWidth;
    if (Math.abs(w - this.lastWidth) < 8) return;
    this.lastWidth = w;
    clearTimeout(this.requeryTimer);
    this.requeryTimer = setTimeout(() => {
      this.selected.forEach((run) => void this.fetchHeatmap(run));
      this.detail.draw();
    }, 150);
  }

  // ---- page states ---------------------------------------------------------

  private setState(state: ViewState, error?: string): void {
    this.root.setAttribute("data-state", state);
    const status = this.toolbar.status;
    status.replaceChildren();
    this.banner.style.display = "none";
    if (state === "loading") status.append(el("span", { class: CLASS.spinner }), "Loading…");
    if (state === "ready") {
      const n = this.store.runs().length;
      status.textContent = `${n} run${n === 1 ? "" : "s"} with NeuralDbg data`;
    }
    this.body.style.display = state === "empty" || state === "error" ? "none" : "";
    if (state === "empty") this.screen.showEmpty();
    else if (state === "error") this.screen.showError(error ?? "");
    else this.screen.hide();
  }

  /** A failed request: the error screen before anything is shown, a banner after. */
  private fail(e: unknown): void {
    const msg = errorText(e);
    if (this.root.getAttribute("data-state") === "ready") {
      this.banner.textContent = `Reload failed: ${msg}`;
      this.banner.style.display = "";
    } else {
      this.setState("error", msg);
    }
  }
}

/** What a failed request says (an HttpError's message carries the status and the server's reason). */
function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
