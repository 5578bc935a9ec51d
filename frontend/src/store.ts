/**
 * The tab's data model (as in TensorBoard's example_raw_scalars, model.js
 * beside views.js): asks the plugin routes through Api (relative URLs), keeps
 * what the views draw (the run list; per run its meta, tables, events and
 * last heatmap) and drops stale answers. It builds no DOM.
 *
 * Each kind of request has a slot (`Latest`): a new request aborts the older
 * one of its slot. Every load resolves to its answer, or to null when a newer
 * request of the same slot superseded it (its answer, or its error, is
 * dropped and the cache is left alone); it rejects only with the error of a
 * request that is still current.
 */
import { Api, isAbort, Latest } from "./api";
import { BUILTIN_TABLES, tablesFor, type Tables } from "./tables";
import type { EventList, Heatmap, LayerSeries, Meta, RunInfo, StepRange } from "./types";
import { windowAround } from "./viewport";

/** The layer route refuses more points than this (docs/API.md). */
export const LAYER_MAX_POINTS = 100000;
/** Events asked per run (the route's default). */
const EVENT_LIMIT = 1000;

interface RunEntry {
  meta: Meta;
  tables: Tables;
  events: EventList;
}

interface HeatmapEntry {
  /** The meta it was asked under: a reload replaces the meta, and so the cache. */
  meta: Meta;
  key: string;
  heatmap: Heatmap;
}

/** A heatmap of no columns, for a step range the run does not reach. */
export function emptyHeatmap(run: string, metric: string, meta: Meta): Heatmap {
  const layers = meta.layers.map((l) => l.name);
  return { run, metric, rows: layers.length, cols: 0, layers, colStart: [], colEnd: [], values: new Float32Array(0), states: new Uint8Array(0) };
}

/** `range` clipped to the run's steps; null = all of them; "none" when the run has no step in it. */
export function clipToRun(range: StepRange | null, meta: Meta): StepRange | null | "none" {
  if (!range) return null;
  const r = { start: Math.max(range.start, meta.first_step), end: Math.min(range.end, meta.last_step) };
  return r.start > r.end ? "none" : r;
}

/** The steps a layer detail asks for: the shown ones within the run, at most LAYER_MAX_POINTS around `step`. */
export function layerRange(meta: Meta, shown: StepRange | null, step: number): StepRange {
  let r: StepRange = shown ?? { start: meta.first_step, end: meta.last_step };
  r = { start: Math.max(r.start, meta.first_step), end: Math.min(r.end, meta.last_step) };
  return r.end - r.start + 1 > LAYER_MAX_POINTS ? windowAround(step, LAYER_MAX_POINTS - 1, r) : r;
}

function hasData(s: LayerSeries, metric: string): boolean {
  return s.metrics[metric]?.some((v) => Number.isFinite(v)) ?? false;
}

export class Store {
  private runList: RunInfo[] = [];
  private readonly entries = new Map<string, RunEntry>();
  private readonly heatmaps = new Map<string, HeatmapEntry>();
  private readonly slots = new Map<string, Latest>();

  constructor(private readonly api: Api) {}

  // ---- what is cached ------------------------------------------------------

  /** The last run list loaded. */
  runs(): readonly RunInfo[] {
    return this.runList;
  }

  runInfo(run: string | null): RunInfo | undefined {
    return run === null ? undefined : this.runList.find((r) => r.run === run);
  }

  meta(run: string): Meta | undefined {
    return this.entries.get(run)?.meta;
  }

  /** The tables to draw a run with: its server's, or the built-in ones before its meta is in. */
  tables(run: string | null): Tables {
    return (run === null ? undefined : this.entries.get(run)?.tables) ?? BUILTIN_TABLES;
  }

  events(run: string): EventList | undefined {
    return this.entries.get(run)?.events;
  }

  /** The last heatmap loaded for a run (any metric and range). */
  heatmap(run: string): Heatmap | undefined {
    return this.heatmaps.get(run)?.heatmap;
  }

  // ---- loads ---------------------------------------------------------------

  loadRuns(): Promise<RunInfo[] | null> {
    return this.latest("runs", (signal) => this.api.runs(signal), (runs) => {
      this.runList = runs;
    });
  }

  /** A run's meta and events, both fresh (a reload): the run's heatmap cache goes with the old meta. */
  loadRun(run: string): Promise<Meta | null> {
    return this.latest(
      `run:${run}`,
      (signal) => Promise.all([this.api.meta(run, signal), this.api.events(run, EVENT_LIMIT, signal)]),
      ([meta, events]) => {
        this.entries.set(run, { meta, tables: tablesFor(meta), events });
      },
    ).then((answer) => answer && answer[0]);
  }

  /**
   * A run's heatmap of one metric over `range` (null = every step), at most
   * `maxCols` columns. Asked again with the same arguments under the same
   * meta, it answers from the cache; a range the run does not reach answers
   * an empty heatmap without asking. Resolves to null without asking when the
   * run's meta is not loaded.
   */
  loadHeatmap(run: string, metric: string, range: StepRange | null, maxCols: number): Promise<Heatmap | null> {
    const entry = this.entries.get(run);
    const meta = entry?.meta;
    const clipped = meta ? clipToRun(range, meta) : null;
    const key = JSON.stringify([metric, clipped, Math.floor(maxCols)]);
    const cached = this.heatmaps.get(run);
    return this.latest(
      `heatmap:${run}`,
      (signal) => {
        if (!meta) return Promise.resolve(null);
        if (cached && cached.meta === meta && cached.key === key) return Promise.resolve(cached.heatmap);
        if (clipped === "none") return Promise.resolve(emptyHeatmap(run, metric, meta));
        return this.api.heatmap(run, metric, clipped, maxCols, signal);
      },
      (heatmap) => {
        if (meta && heatmap) this.heatmaps.set(run, { meta, key, heatmap });
      },
    ).then((hm) => hm ?? null);
  }

  /**
   * One layer over `range` for the layer detail: the first metric of `order`,
   * then, while the answer has no data for the last one asked (a ReLU has no
   * gradient norm), up to two more, one at a time, merged into one series.
   * Not cached: each metric asked costs a read of the whole run on the server.
   */
  loadLayer(run: string, layer: string, range: StepRange, order: readonly string[]): Promise<LayerSeries | null> {
    this.slot("series").cancel();
    return this.latest("layer", async (signal) => {
      let series = await this.api.layer(run, layer, range, order.slice(0, 1), signal);
      for (let k = 1; k < Math.min(3, order.length) && !signal.aborted && !hasData(series, order[k - 1]); k++) {
        const more = await this.api.layer(run, layer, range, [order[k]], signal);
        const same = more.steps.length === series.steps.length && more.steps.every((v, i) => v === series.steps[i]);
        series = same ? { ...series, metrics: { ...series.metrics, ...more.metrics } } : more;
      }
      return series;
    });
  }

  /** One more series of the open layer (the detail's menu), for the same steps. */
  loadSeries(run: string, layer: string, range: StepRange, metric: string): Promise<LayerSeries | null> {
    return this.latest("series", (signal) => this.api.layer(run, layer, range, [metric], signal));
  }

  /** Drop the layer detail's requests (it was closed). */
  cancelLayer(): void {
    this.slot("layer").cancel();
    this.slot("series").cancel();
  }

  // ---- stale answers -------------------------------------------------------

  private slot(key: string): Latest {
    let s = this.slots.get(key);
    if (!s) this.slots.set(key, (s = new Latest()));
    return s;
  }

  /** Run `ask` in slot `key`; apply and return its answer only while it is the slot's newest. */
  private async latest<T>(key: string, ask: (signal: AbortSignal) => Promise<T>, apply?: (answer: T) => void): Promise<T | null> {
    const slot = this.slot(key);
    const { token, signal } = slot.start();
    try {
      const answer = await ask(signal);
      if (!slot.isCurrent(token)) return null;
      apply?.(answer);
      return answer;
    } catch (e) {
      if (isAbort(e) || !slot.isCurrent(token)) return null;
      throw e;
    }
  }
}
