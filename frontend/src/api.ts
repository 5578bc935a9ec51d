/**
 * The data model's I/O: the plugin routes of docs/API.md over RELATIVE urls
 * (so TensorBoard's --path_prefix and /experiment/<id>/ keep working), decoded
 * and typed. No caching here: the store (store.ts) caches what is shown, and `Latest`
 * drops answers that a newer request for the same slot has superseded.
 */
import {
  decodeEvents,
  decodeHeatmap,
  decodeLayer,
  decodeMeta,
  decodeRuns,
} from "./decode";
import type { EventList, Heatmap, LayerSeries, Meta, RunInfo, StepRange } from "./types";

/** An HTTP error answer (400/404/500...) with the server's plain-text reason. */
export class HttpError extends Error {
  constructor(readonly status: number, readonly reason: string) {
    super(`server answered ${status}: ${reason.slice(0, 300)}`);
  }
}

export type Fetcher = (url: string, init?: { signal?: AbortSignal }) => Promise<Response>;

type Params = Record<string, string | number | readonly string[] | undefined>;

/** A query string; an array value repeats its key (`metric=a&metric=b`). */
function query(params: Params): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined) continue;
    if (typeof v === "object") for (const x of v) q.append(k, x);
    else q.append(k, String(v));
  }
  return q.toString();
}

export class Api {
  constructor(private readonly fetcher: Fetcher = (u, i) => fetch(u, i), private readonly base = "./") {}

  private async get<T>(route: string, params: Params, decode: (raw: unknown) => T, signal?: AbortSignal): Promise<T> {
    const q = query(params);
    const res = await this.fetcher(`${this.base}${route}${q ? `?${q}` : ""}`, { signal });
    if (!res.ok) throw new HttpError(res.status, await res.text().catch(() => ""));
    return decode(await res.json());
  }

  runs(signal?: AbortSignal): Promise<RunInfo[]> {
    return this.get("runs", {}, decodeRuns, signal);
  }

  meta(run: string, signal?: AbortSignal): Promise<Meta> {
    return this.get("meta", { run }, decodeMeta, signal);
  }

  /** Binned matrix, asked as `format=b64` (raw float32/uint8; decodeHeatmap also takes the JSON form). */
  heatmap(run: string, metric: string, range: StepRange | null, maxCols: number, signal?: AbortSignal): Promise<Heatmap> {
    return this.get(
      "heatmap",
      { run, metric, start: range?.start, end: range?.end, max_cols: Math.max(1, Math.min(5000, Math.floor(maxCols))), format: "b64" },
      decodeHeatmap,
      signal,
    );
  }

  events(run: string, limit = 1000, signal?: AbortSignal): Promise<EventList> {
    return this.get("events", { run, limit }, decodeEvents, signal);
  }

  /**
   * One layer at full resolution. `metrics` (repeated `metric=`) limits the
   * series read: the server reads each requested metric of the WHOLE run
   * (~0.6 s each at 1,000 layers x 20,000 steps), so ask only for those shown.
   * An empty list would mean "all 17" to the server: it is refused here.
   */
  layer(run: string, layer: string, range: StepRange | null, metrics: readonly string[], signal?: AbortSignal): Promise<LayerSeries> {
    const metric = [...new Set(metrics)];
    if (metric.length === 0) return Promise.reject(new Error("Api.layer: name at least one metric"));
    return this.get("layer", { run, layer, start: range?.start, end: range?.end, metric }, decodeLayer, signal);
  }
}

/**
 * One slot of "only the newest answer counts": start() aborts the previous
 * request of the slot and returns a token; isCurrent(token) tells whether an
 * answer may still be applied. Responses that arrive late are dropped.
 */
export class Latest {
  private seq = 0;
  private ctrl: AbortController | null = null;

  start(): { token: number; signal: AbortSignal } {
    this.ctrl?.abort();
    this.ctrl = new AbortController();
    return { token: ++this.seq, signal: this.ctrl.signal };
  }

  isCurrent(token: number): boolean {
    return token === this.seq;
  }

  cancel(): void {
    this.ctrl?.abort();
    this.ctrl = null;
    this.seq++;
  }
}

/** True for the error an aborted fetch rejects with (not worth showing). */
export function isAbort(e: unknown): boolean {
  return typeof e === "object" && e !== null && (e as { name?: string }).name === "AbortError";
}
