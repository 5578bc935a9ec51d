/**
 * Zoom and pan over steps: pure functions on inclusive step ranges.
 * Every result is clamped to the run's bounds and keeps at least MIN_SPAN
 * steps (or the whole run when it is shorter).
 */
import type { StepRange } from "./types";

export const MIN_SPAN = 8;

function spanOf(r: StepRange): number {
  return r.end - r.start;
}

/** Clamp `r` into `bounds`, keeping its span when possible. */
export function clampRange(r: StepRange, bounds: StepRange, minSpan = MIN_SPAN): StepRange {
  const full = spanOf(bounds);
  let span = Math.min(full, Math.max(Math.min(minSpan, full), Math.round(spanOf(r))));
  let start = Math.round(r.start);
  if (start < bounds.start) start = bounds.start;
  if (start + span > bounds.end) start = bounds.end - span;
  if (span < 0) span = 0;
  return { start, end: start + span };
}

/**
 * Zoom by `factor` (< 1 zooms in) keeping the step `anchor` at the same
 * relative position on screen.
 */
export function zoomRange(r: StepRange, factor: number, anchor: number, bounds: StepRange, minSpan = MIN_SPAN): StepRange {
  const span = spanOf(r);
  const newSpan = Math.max(Math.min(minSpan, spanOf(bounds)), span * factor);
  const rel = span > 0 ? (anchor - r.start) / span : 0.5;
  const start = anchor - rel * newSpan;
  return clampRange({ start, end: start + newSpan }, bounds, minSpan);
}

/** Shift by `delta` steps. */
export function panRange(r: StepRange, delta: number, bounds: StepRange): StepRange {
  return clampRange({ start: r.start + delta, end: r.end + delta }, bounds, 0);
}

/** A range of `span` steps centred on `step`. */
export function windowAround(step: number, span: number, bounds: StepRange): StepRange {
  const start = step - span / 2;
  return clampRange({ start, end: start + span }, bounds);
}

/** Whether `r` shows the whole of `bounds` (then a reload follows new steps). */
export function isFull(r: StepRange, bounds: StepRange): boolean {
  return r.start <= bounds.start && r.end >= bounds.end;
}

/** The union of several step ranges. */
export function unionRange(ranges: readonly StepRange[]): StepRange | null {
  if (ranges.length === 0) return null;
  return {
    start: Math.min(...ranges.map((r) => r.start)),
    end: Math.max(...ranges.map((r) => r.end)),
  };
}
