/**
 * One run's heatmap: canvas (painted by colour bucket), row labels (the
 * module tree, treeLabels.ts), step axis and DOM overlays (hover, keyboard
 * cursor, root-cause row and onset marker, event pointer, tooltip, the bands
 * of expanded groups). Mouse moves only move overlays with `transform`; the
 * canvas is repainted only when the rows, their data or the size change.
 */
import type { Scale } from "../colormap";
import { el, setChildren } from "../dom";
import { formatSteps, niceTicks } from "../format";
import { cellAt, cellRect, colForStep, computeLayout, type Layout } from "../layout";
import type { MetricInfo } from "../metrics";
import { paintHeatmap, paintNotes } from "../paint";
import { RowColors } from "../rowcolors";
import { cellOf, rowOfRef, type RowView } from "../rowview";
import type { StateTable } from "../states";
import { CLASS } from "../styles";
import { cellNotes, notesSummary } from "../cells";
import { tooltipLines } from "../tooltip";
import { RowKind, type ModuleTree } from "../tree";
import { keyAction } from "../keys";
import { axisLayout, axisStep, axisTicks } from "../stepaxis";
import { treeLabelWidth } from "./labels";
import { TreeLabels } from "./treeLabels";
import type { Meta, NdEvent, RunInfo, StepRange } from "../types";

export interface PanelData {
  info: RunInfo;
  meta: Meta;
  /** The rows to draw: the heatmap through the module tree. */
  view: RowView;
  scale: Scale;
  palette: readonly string[];
  states: StateTable;
  metric: MetricInfo;
  events: readonly NdEvent[];
  rowHeight: number;
}

/** A cell identified by what it means, so it survives re-binning. */
export interface CellRef {
  layer: string;
  step: number;
}

export interface PanelCallbacks {
  onZoom(run: string, factor: number, anchorStep: number): void;
  onPan(run: string, deltaSteps: number): void;
  /** Open the layer of a row of data at a step. */
  onSelect(run: string, cell: CellRef): void;
  onCursor(run: string, cell: CellRef): void;
  /**
   * Expand (true) or collapse (false) the group of row id `id`; `then`, if
   * given, is where the cursor goes after (the layer that decided a cell).
   */
  onToggle(run: string, id: string, open: boolean, then?: CellRef): void;
  onEscape(): void;
  /** The mouse is over a cell (null: left the map): the other runs' panels echo it. */
  onHover?(run: string, cell: CellRef | null): void;
}

const DRAG_THRESHOLD = 3;
export class HeatmapPanel {
  readonly element: HTMLElement;
  private readonly head: HTMLElement;
  private readonly labels: TreeLabels;
  private readonly wrap: HTMLElement;
  /** Behind the canvas: the bands of expanded groups show through their empty rows. */
  private readonly bands: HTMLElement;
  private readonly canvas: HTMLCanvasElement;
  private readonly axis: HTMLElement;
  private readonly hoverBox: HTMLElement;
  private readonly cursorBox: HTMLElement;
  private readonly rootRow: HTMLElement;
  private readonly onsetRing: HTMLElement;
  private readonly onsetTag: HTMLElement;
  private readonly pointer: HTMLElement;
  /** Where the mouse is in another run's panel: its step (a column line) and cell. */
  private readonly echoCol: HTMLElement;
  private readonly echoBox: HTMLElement;
  private echoRef: CellRef | null = null;
  /** The step axis shared with the other runs shown, null when this run is shown alone. */
  private shared: StepRange | null = null;
  private readonly tooltip: HTMLElement;
  private readonly live: HTMLElement;
  private readonly note: HTMLElement;

  private data: PanelData | null = null;
  private layout: Layout | null = null;
  private idx: Uint8Array | undefined;
  private cursor: { row: number; col: number } | null = null;
  private cursorRef: CellRef | null = null;
  private pointRef: CellRef | null = null;
  /** Layer name -> type, of `typesOf` (the labels' titles and the tooltip read it). */
  private types = new Map<string, string>();
  private typesOf: Meta | null = null;
  private labelPx = 0;
  private readonly colors = new RowColors();
  /** Last mouse position over the canvas (client px), null when outside. */
  private hoverAt: { x: number; y: number } | null = null;
  private drag: { x0: number; moved: boolean } | null = null;
  /** Duration of the last paint (ms), exposed as data-paint-ms for tests. */
  lastPaintMs = 0;
  private paintCount = 0;
  private painted: {
    view: RowView;
    width: number;
    dpr: number;
    rowHeight: number;
    scale: Scale;
    palette: readonly string[];
    shared: StepRange | null;
  } | null = null;

  constructor(readonly run: string, private readonly cb: PanelCallbacks) {
    this.head = el("div", { class: "nd-panel-head" });
    this.labels = new TreeLabels(run, {
      onToggle: (row, open) => this.toggleRow(row, open),
      onActivate: (row) => this.activateRow(row, this.cursor?.col ?? this.defaultCol()),
      onFocusRow: (row) => this.moveCursor(row, this.cursor?.col ?? this.defaultCol(), false),
    });
    this.canvas = el("canvas", {
      class: "nd-canvas",
      attrs: {
        tabindex: 0,
        role: "application",
        "aria-roledescription": "heatmap",
        "aria-label": `Layer by step heatmap of run ${run}. Arrow keys move, Enter opens the layer or expands the group, + and - zoom, [ and ] pan.`,
      },
    });
    const ov = (cls: string) => el("div", { class: `nd-ov ${cls}`, style: { display: "none" } });
    this.rootRow = ov("nd-rootrow");
    this.hoverBox = ov("nd-hover");
    this.cursorBox = ov("nd-cursor");
    this.onsetRing = ov("nd-onset");
    this.onsetTag = ov("nd-onset-tag");
    this.pointer = ov("nd-pointer");
    this.echoCol = ov("nd-echo-col");
    this.echoBox = ov("nd-echo");
    this.tooltip = ov("nd-tooltip");
    this.note = el("div", { class: CLASS.note, style: { display: "none" } });
    this.bands = el("div", { class: "nd-bands", attrs: { "aria-hidden": "true" } });
    this.wrap = el("div", { class: "nd-canvas-wrap" }, [
      this.bands,
      this.canvas,
      this.rootRow,
      this.hoverBox,
      this.cursorBox,
      this.pointer,
      this.echoCol,
      this.echoBox,
      this.onsetRing,
      this.onsetTag,
      this.tooltip,
    ]);
    this.axis = el("div", { class: "nd-axis" });
    this.live = el("div", { class: "nd-sr", attrs: { "aria-live": "polite" } });
    this.element = el("section", { class: `${CLASS.card} nd-panel`, attrs: { "data-run": run } }, [
      this.head,
      this.note,
      el("div", { class: "nd-plot" }, [this.labels.element, this.wrap, el("div"), this.axis]),
      this.live,
    ]);
    this.bindEvents();
  }

  /**
   * Size the label column for the rows of this tree. Call before
   * plotWidth(): the canvas gets what the labels leave, and max_cols must
   * not exceed it (a column narrower than a pixel could hide a failing cell).
   */
  setRows(tree: ModuleTree): void {
    this.labelPx = treeLabelWidth(tree);
    const w = `${this.labelPx}px`;
    if (this.labels.element.style.width !== w) this.labels.element.style.width = w;
  }

  /** Width (css px) the canvas may use: what max_cols is asked for. */
  plotWidth(): number {
    return Math.max(50, Math.floor(this.wrap.clientWidth || this.element.clientWidth - 200));
  }

  /** A request for this panel is in flight: the image shown is out of date (dimmed after a moment). */
  setBusy(busy: boolean): void {
    this.element.toggleAttribute("data-busy", busy);
  }

  /**
   * Draw on the step axis of the runs shown side by side (stepaxis.ts), or on
   * this run's own bins (null: one run shown). The app calls update() after.
   */
  setAxis(axis: StepRange | null): void {
    this.shared = axis;
  }

  /** Echo the cell the mouse is over in another run's panel (null hides it). */
  echo(ref: CellRef | null): void {
    this.echoRef = ref;
    this.placeEcho();
  }

  setPrimary(primary: boolean): void {
    this.element.classList.toggle(CLASS.primary, primary);
  }

  focus(): void {
    this.canvas.focus({ preventScroll: false });
  }

  /** New data: recolour and repaint now (the app batches calls per frame). */
  update(data: PanelData): void {
    this.data = data;
    if (data.meta !== this.typesOf) {
      this.typesOf = data.meta;
      this.types = new Map(data.meta.layers.map((l) => [l.name, l.type]));
    }
    const view = data.view;
    this.renderHead();
    if (view.rows === 0 || view.cols === 0) {
      this.note.textContent =
        view.heatmap.rows === 0 ? "This run has no layers yet." : view.rows === 0 ? "No layer matches the filter." : "No logged steps in this range.";
      this.note.style.display = "";
      this.wrap.style.display = "none";
      this.labels.element.style.display = "none";
      this.layout = null;
      this.painted = null;
      return;
    }
    this.note.style.display = "none";
    this.wrap.style.display = "";
    this.labels.element.style.display = "";
    this.setRows(view.tree);
    const width = this.plotWidth();
    const dpr = window.devicePixelRatio || 1;
    const prev = this.painted;
    const shared = this.shared;
    // Overlay-only changes (cursor, selection, primary run) must not cost a repaint.
    if (!prev || prev.view !== view || prev.width !== width || prev.dpr !== dpr || prev.rowHeight !== data.rowHeight ||
        prev.shared?.start !== shared?.start || prev.shared?.end !== shared?.end ||
        prev.scale.kind !== data.scale.kind || prev.scale.lo !== data.scale.lo || prev.scale.hi !== data.scale.hi ||
        prev.palette.some((c, i) => c !== data.palette[i])) {
      const t0 = performance.now();
      this.idx = this.colors.indices(view, data.scale);
      this.layout = this.sizeCanvas(view.rows, view.cols, data.rowHeight, width, dpr);
      const ctx = this.canvas.getContext("2d");
      if (ctx) {
        // On a shared axis the cells may not reach the right edge: clear what they leave.
        if (shared) ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
        paintHeatmap(ctx, this.layout, this.idx, data.palette);
        paintNotes(ctx, this.layout, view.heatmap.notes, view.layer);
      }
      this.placeBands();
      this.lastPaintMs = performance.now() - t0;
      this.paintCount++;
      this.painted = { view, width, dpr, rowHeight: data.rowHeight, scale: data.scale, palette: data.palette, shared };
      this.element.setAttribute("data-paint-ms", this.lastPaintMs.toFixed(2));
      this.element.setAttribute("data-paint-count", String(this.paintCount));
      this.element.setAttribute("data-metric", view.heatmap.metric);
      this.element.setAttribute("data-rows", String(view.rows));
      this.element.setAttribute("data-notes", notesSummary(view.heatmap));
    }
    const rc = data.info.root_cause;
    this.labels.render(view, this.layout!, this.labelPx, rc ? rowOfRef(view, rc.layer) : -1, rc?.layer ?? null, this.types);
    if (this.shared) this.markAbsent();
    this.renderAxis();
    this.placeRootCause();
    this.resolveCursor();
    this.placeRef(this.pointer, this.pointRef);
    this.placeEcho();
    this.refreshHover();
  }

  /** The bands of expanded groups without data of their own, behind the canvas. */
  private placeBands(): void {
    const view = this.data!.view;
    const layout = this.layout!;
    const bands: HTMLElement[] = [];
    for (let r = 0; r < view.rows; r++) {
      if (view.kinds[r] !== RowKind.Open || view.layer[r] >= 0) continue;
      const c = cellRect(layout, r, 0);
      bands.push(el("div", { class: "nd-band", style: { transform: `translateY(${c.y}px)`, height: `${c.h}px` } }));
    }
    setChildren(this.bands, bands);
  }

  /** After a repaint the cell under a resting mouse may mean something else: redo its tooltip. */
  private refreshHover(): void {
    const cell = this.hoverAt && this.layout ? this.cellFromPoint(this.hoverAt.x, this.hoverAt.y) : null;
    if (cell) this.showHover(cell.row, cell.col);
    else this.hideHover();
  }

  /** Move the keyboard cursor (by meaning); null hides it. */
  setCursor(ref: CellRef | null): void {
    this.cursorRef = ref;
    this.resolveCursor();
  }

  /** Point at an event's cell (from the event list); null hides the pointer. */
  pointAt(ref: CellRef | null): void {
    this.pointRef = ref;
    this.placeRef(this.pointer, ref);
  }

  private sizeCanvas(rows: number, cols: number, rowHeight: number, width: number, dpr: number): Layout {
    const hm = this.data!.view.heatmap;
    const layout = this.shared
      ? axisLayout(width, rows, hm.colStart, hm.colEnd, this.shared, rowHeight, dpr)
      : computeLayout(width, rows, cols, rowHeight, dpr);
    const wPx = this.shared ? Math.max(1, Math.round(width * dpr)) : layout.xEdges[cols];
    const hPx = layout.yEdges[rows];
    if (this.canvas.width !== wPx) this.canvas.width = wPx;
    if (this.canvas.height !== hPx) this.canvas.height = hPx;
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${layout.heightCss}px`;
    this.canvas.style.transform = "";
    this.labels.element.style.height = `${layout.heightCss}px`;
    return layout;
  }

  private renderHead(): void {
    const d = this.data!;
    const hm = d.view.heatmap;
    const status = d.info.status;
    // Side by side the heatmap holds every run's layers (align.ts): the count is this run's own.
    const layers = this.shared ? d.meta.layers.length : hm.rows;
    const rows = d.view.rows === layers ? `${layers} layers` : `${d.view.rows} rows of ${layers} layers`;
    const sub =
      hm.cols > 0
        ? `${formatSteps(hm.colStart[0], hm.colEnd[hm.cols - 1])} · ${hm.cols} col${hm.cols === 1 ? "" : "s"} · ${rows}`
        : `${d.meta.num_steps} steps`;
    setChildren(this.head, [
      el("span", { class: "nd-panel-run", text: this.run, attrs: { title: this.run } }),
      el("span", { class: `nd-badge nd-badge-${status}`, text: status }),
      el("span", { class: "nd-panel-sub", text: sub }),
    ]);
  }

  private renderAxis(): void {
    const hm = this.data!.view.heatmap;
    const layout = this.layout!;
    const first = hm.colStart[0];
    const last = hm.colEnd[hm.cols - 1];
    const target = Math.max(2, Math.floor(layout.widthCss / 90));
    const tick = (step: number, x: number) => el("span", { class: "nd-tick", text: String(step), style: { left: `${x}px` } });
    if (this.shared) {
      setChildren(this.axis, axisTicks(this.shared, layout.widthCss, target).map((t) => tick(t.step, t.x)));
      return;
    }
    const ticks = niceTicks(first, last, target).map((step) => {
      const c = colForStep(hm.colStart, hm.colEnd, step);
      const r = cellRect(layout, 0, c);
      return tick(step, r.x + r.w / 2);
    });
    setChildren(this.axis, ticks);
  }

  /** The row showing a layer or row id (its own, or the collapsed group holding it). */
  private rowOf(layer: string): number {
    return this.data ? rowOfRef(this.data.view, layer) : -1;
  }

  /** Column of a step if it is inside the shown bins, else -1. */
  private colOf(step: number): number {
    const hm = this.data?.view.heatmap;
    if (!hm || hm.cols === 0 || step < hm.colStart[0] || step > hm.colEnd[hm.cols - 1]) return -1;
    return colForStep(hm.colStart, hm.colEnd, step);
  }

  private place(box: HTMLElement, x: number, y: number, w: number, h: number): void {
    box.style.display = "";
    box.style.width = `${w}px`;
    box.style.height = `${h}px`;
    box.style.transform = `translate(${x}px, ${y}px)`;
  }

  /** A marker box around a cell, at least 8x8 css px so it stays visible on tiny cells. */
  private placeCell(box: HTMLElement, row: number, col: number, pad = 0): void {
    const r = cellRect(this.layout!, row, col);
    const w = Math.max(8, r.w) + 2 * pad;
    const h = Math.max(8, r.h) + 2 * pad;
    this.place(box, r.x + r.w / 2 - w / 2, r.y + r.h / 2 - h / 2, w, h);
  }

  /** A box whose 2px border lies just outside a cell (at least 4 css px wide). */
  private placeOutline(box: HTMLElement, row: number, col: number): void {
    const r = cellRect(this.layout!, row, col);
    const w = Math.max(4, r.w);
    this.place(box, r.x + r.w / 2 - w / 2 - 3, r.y - 3, w + 6, r.h + 6);
  }

  private placeRef(box: HTMLElement, ref: CellRef | null): void {
    const row = ref && this.layout ? this.rowOf(ref.layer) : -1;
    const col = ref && row >= 0 ? this.colOf(ref.step) : -1;
    if (row < 0 || col < 0) {
      box.style.display = "none";
      return;
    }
    this.placeCell(box, row, col, 3);
  }

  /** Side by side, the rows of layers this run does not have (align.ts) say so: greyed, "not in this run". */
  private markAbsent(): void {
    for (const label of this.labels.element.querySelectorAll<HTMLElement>(".nd-label[data-kind=leaf]")) {
      const id = label.getAttribute("data-layer") ?? "";
      if (this.types.has(id)) continue;
      label.classList.add("nd-label-absent");
      label.title = `${id} · not in run ${this.run}`;
    }
  }

  /** The echo of another panel's hover: a line at its step, a box on its cell when this run has the row. */
  private placeEcho(): void {
    const ref = this.echoRef;
    const col = ref && this.layout ? this.colOf(ref.step) : -1;
    if (!ref || col < 0) {
      this.echoCol.style.display = this.echoBox.style.display = "none";
      return;
    }
    const r = cellRect(this.layout!, 0, col);
    this.place(this.echoCol, r.x, 0, Math.max(1, r.w), this.layout!.heightCss);
    this.placeRef(this.echoBox, ref);
  }

  private placeRootCause(): void {
    const rc = this.data!.info.root_cause;
    const row = rc ? this.rowOf(rc.layer) : -1;
    this.onsetRing.style.display = this.onsetTag.style.display = this.rootRow.style.display = "none";
    if (!rc || row < 0) return;
    const layout = this.layout!;
    const r = cellRect(layout, row, 0);
    this.place(this.rootRow, 0, r.y - 1, layout.widthCss, r.h + 2);
    const col = this.colOf(rc.step);
    if (col < 0) return;
    // An outline around the cell, clear of it: a single-step root cause
    // (bad_batch's <input> at step 100) stays visible inside.
    this.placeOutline(this.onsetRing, row, col);
    const c = cellRect(layout, row, col);
    this.onsetTag.textContent = `onset · step ${rc.step}`;
    this.onsetTag.style.display = "";
    // Put the tag right of the cell, or left of it near the right edge; above
    // the row unless it is the first rows.
    const tagW = this.onsetTag.offsetWidth || 110;
    const x = c.x + c.w + 8 + tagW > layout.widthCss ? c.x - tagW - 8 : c.x + c.w + 8;
    const y = c.y + c.h / 2 - 9;
    this.onsetTag.style.transform = `translate(${Math.max(0, x)}px, ${Math.max(0, Math.min(layout.heightCss - 18, y))}px)`;
  }

  private resolveCursor(): void {
    const ref = this.cursorRef;
    const row = ref && this.layout ? this.rowOf(ref.layer) : -1;
    const col = ref && row >= 0 ? this.colOf(ref.step) : -1;
    this.cursor = row >= 0 && col >= 0 ? { row, col } : null;
    this.labels.setActive(this.cursor ? this.cursor.row : -1);
    if (!this.cursor) {
      this.cursorBox.style.display = "none";
      return;
    }
    this.placeCell(this.cursorBox, this.cursor.row, this.cursor.col, 1);
  }

  private refAt(row: number, col: number): CellRef {
    const view = this.data!.view;
    return { layer: view.ids[row], step: view.heatmap.colStart[col] };
  }

  private tooltipFor(row: number, col: number): string[] {
    const d = this.data!;
    const view = d.view;
    const hm = view.heatmap;
    const id = view.ids[row];
    const first = hm.colStart[col];
    const last = hm.colEnd[col];
    if (view.kinds[row] === RowKind.Open && view.layer[row] < 0) {
      return [id, `expanded: ${view.tree.nodes[view.tree.byId.get(id)!].rows.length} layers below`];
    }
    const cell = cellOf(view, row, col);
    const group = view.group[row] >= 0;
    const events = d.events.filter((e) => e.step >= first && e.step <= last && rowOfRef(view, e.layer) === row).length;
    return tooltipLines({
      layer: id,
      type: group ? "" : (this.types.get(id) ?? ""),
      first,
      last,
      value: cell.value,
      state: d.states.name(cell.state),
      metric: d.metric,
      events,
      rows: group ? view.size[row] : undefined,
      source: group && cell.source >= 0 ? hm.layers[cell.source] : undefined,
      ...cellNotes(hm, group ? -1 : view.layer[row], col),
    });
  }

  private showHover(row: number, col: number): void {
    const layout = this.layout!;
    const r = cellRect(layout, row, col);
    this.place(this.hoverBox, r.x - 1, r.y - 1, Math.max(3, r.w + 2), Math.max(3, r.h + 2));
    setChildren(this.tooltip, this.tooltipFor(row, col).map((t) => el("div", { text: t })));
    this.tooltip.style.display = "";
    const tw = this.tooltip.offsetWidth;
    const th = this.tooltip.offsetHeight;
    let x = r.x + r.w + 12;
    if (x + tw > layout.widthCss) x = r.x - tw - 12;
    let y = r.y + r.h + 8;
    if (y + th > Math.max(layout.heightCss, th + 4)) y = r.y - th - 8;
    this.tooltip.style.transform = `translate(${Math.max(0, x)}px, ${Math.max(0, y)}px)`;
  }

  private hideHover(): void {
    this.hoverBox.style.display = "none";
    this.tooltip.style.display = "none";
  }

  private cellFromEvent(e: MouseEvent): { row: number; col: number } | null {
    return this.cellFromPoint(e.clientX, e.clientY);
  }

  private cellFromPoint(clientX: number, clientY: number): { row: number; col: number } | null {
    if (!this.layout) return null;
    const b = this.canvas.getBoundingClientRect();
    return cellAt(this.layout, clientX - b.left, clientY - b.top);
  }

  private stepAtX(clientX: number): number | null {
    const hm = this.data?.view.heatmap;
    if (!this.layout || !hm || hm.cols === 0) return null;
    const b = this.canvas.getBoundingClientRect();
    if (this.shared) return axisStep(this.shared, this.layout.widthCss, clientX - b.left);
    const c = cellAt(this.layout, Math.min(Math.max(0, clientX - b.left), this.layout.widthCss - 0.01), 0);
    return c ? (hm.colStart[c.col] + hm.colEnd[c.col]) / 2 : null;
  }

  /** Steps per css pixel at the current binning. */
  private stepsPerPx(): number {
    const hm = this.data!.view.heatmap;
    if (this.shared) return (this.shared.end - this.shared.start + 1) / this.layout!.widthCss;
    return (hm.colEnd[hm.cols - 1] - hm.colStart[0] + 1) / this.layout!.widthCss;
  }

  private bindEvents(): void {
    const c = this.canvas;
    c.addEventListener("mousemove", (e) => {
      if (this.drag) {
        const dx = e.clientX - this.drag.x0;
        if (Math.abs(dx) > DRAG_THRESHOLD) this.drag.moved = true;
        if (this.drag.moved) {
          this.wrap.classList.add(CLASS.dragging);
          // Instant feedback: slide the painted image; the re-query repaints.
          c.style.transform = `translateX(${dx}px)`;
          this.hideHover();
          return;
        }
      }
      this.hoverAt = { x: e.clientX, y: e.clientY };
      const cell = this.cellFromEvent(e);
      if (cell) this.showHover(cell.row, cell.col);
      else this.hideHover();
      this.cb.onHover?.(this.run, cell ? this.refAt(cell.row, cell.col) : null);
    });
    c.addEventListener("mouseleave", () => {
      this.hoverAt = null;
      this.hideHover();
      this.cb.onHover?.(this.run, null);
    });
    c.addEventListener("mousedown", (e) => {
      if (e.button !== 0) return;
      this.drag = { x0: e.clientX, moved: false };
      const up = (ev: MouseEvent) => {
        window.removeEventListener("mouseup", up);
        const drag = this.drag;
        this.drag = null;
        this.wrap.classList.remove(CLASS.dragging);
        if (!drag || !this.layout || !this.data) return;
        if (drag.moved) {
          const delta = -Math.round((ev.clientX - drag.x0) * this.stepsPerPx());
          if (delta !== 0) this.cb.onPan(this.run, delta);
          else c.style.transform = "";
          return;
        }
        const cell = this.cellFromEvent(ev);
        if (cell) {
          this.cb.onCursor(this.run, this.refAt(cell.row, cell.col));
          this.activateRow(cell.row, cell.col);
        }
      };
      window.addEventListener("mouseup", up);
    });
    c.addEventListener(
      "wheel",
      (e) => {
        if (!this.data || !this.layout) return;
        const anchor = this.stepAtX(e.clientX);
        if (anchor === null) return;
        e.preventDefault();
        if (Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
          this.cb.onPan(this.run, Math.round(e.deltaX * this.stepsPerPx()));
        } else {
          this.cb.onZoom(this.run, e.deltaY > 0 ? 1.25 : 0.8, anchor);
        }
      },
      { passive: false },
    );
    c.addEventListener("keydown", (e) => this.onKey(e));
    c.addEventListener("blur", () => this.hideHover());
  }

  private onKey(e: KeyboardEvent): void {
    const d = this.data;
    if (!d || !this.layout) return;
    const hm = d.view.heatmap;
    const cur = this.cursor ?? { row: 0, col: 0 };
    const action = keyAction(e.key, e.shiftKey, cur.row, cur.col, d.view.rows, hm.cols);
    if (!action) return;
    e.preventDefault();
    switch (action.kind) {
      case "move":
        this.moveCursor(action.row, action.col);
        break;
      case "select":
        if (!this.cursor) this.moveCursor(cur.row, cur.col);
        this.activateRow(cur.row, cur.col);
        break;
      case "zoom":
        this.cb.onZoom(this.run, action.factor, (hm.colStart[cur.col] + hm.colEnd[cur.col]) / 2);
        break;
      case "pan": {
        const span = hm.colEnd[hm.cols - 1] - hm.colStart[0] + 1;
        this.cb.onPan(this.run, action.quarters * Math.max(1, Math.round(span / 4)));
        break;
      }
      case "escape":
        this.hideHover();
        this.cb.onEscape();
        break;
    }
  }

  /** Keyboard cursor to a cell: overlay, tooltip (unless the labels have the focus), screen-reader text, app. */
  private moveCursor(row: number, col: number, hover = true): void {
    if (!this.data || !this.layout) return;
    const ref = this.refAt(row, col);
    this.cursorRef = ref;
    this.resolveCursor();
    if (hover) this.showHover(row, col);
    this.live.textContent = this.tooltipFor(row, col).join(", ");
    this.cb.onCursor(this.run, ref);
  }

  /** The column the labels' keyboard starts on: the root cause's, else the last. */
  private defaultCol(): number {
    const rc = this.data?.info.root_cause;
    const col = rc ? this.colOf(rc.step) : -1;
    return col >= 0 ? col : Math.max(0, (this.data?.view.cols ?? 1) - 1);
  }

  /**
   * Click or Enter on a cell: a row of data opens its layer; a collapsed
   * group expands, the cursor on the layer that decided the cell; an
   * expanded group's band collapses.
   */
  private activateRow(row: number, col: number): void {
    const view = this.data?.view;
    if (!view) return;
    const kind = view.kinds[row];
    if (kind === RowKind.Group) {
      const src = cellOf(view, row, col).source;
      const then = src >= 0 ? { layer: view.heatmap.layers[src], step: view.heatmap.colStart[col] } : undefined;
      this.cb.onToggle(this.run, view.ids[row], true, then);
    } else if (view.layer[row] < 0) {
      this.cb.onToggle(this.run, view.ids[row], false);
    } else {
      this.cb.onSelect(this.run, this.refAt(row, col));
    }
  }

  /** The labels asked to expand or collapse a row's group. */
  private toggleRow(row: number, open: boolean): void {
    const view = this.data?.view;
    if (view) this.cb.onToggle(this.run, view.ids[row], open);
  }
}
