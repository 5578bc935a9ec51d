/**
 * One step axis shared by the runs shown side by side (pure): x is a
 * function of the step alone, the same in every panel, so step 80 is at the
 * same pixel in each, whatever steps each run logged and however the server
 * binned them. A run that ends earlier leaves the rest of its row empty.
 */
import { niceTicks } from "./format";
import { computeLayout, type Layout } from "./layout";
import type { StepRange } from "./types";

/** x (css px) of the left edge of `step` on an axis `widthCss` wide. */
export function axisX(axis: StepRange, widthCss: number, step: number): number {
  const span = Math.max(1, axis.end - axis.start + 1);
  return Math.min(widthCss, Math.max(0, ((step - axis.start) / span) * widthCss));
}

/** The step at x (css px), within the axis. */
export function axisStep(axis: StepRange, widthCss: number, xCss: number): number {
  const span = Math.max(1, axis.end - axis.start + 1);
  const s = axis.start + (Math.min(Math.max(0, xCss), widthCss) / Math.max(1, widthCss)) * span;
  return Math.min(axis.end, Math.max(axis.start, s));
}

/**
 * The columns to ask the server for a run whose steps `run` cover part of the
 * axis: the pixels that part spans, so no column is narrower than a pixel
 * (a failing cell would hide).
 */
export function axisCols(widthCss: number, run: StepRange, axis: StepRange): number {
  const x0 = axisX(axis, widthCss, Math.max(run.start, axis.start));
  const x1 = axisX(axis, widthCss, Math.min(run.end, axis.end) + 1);
  return Math.max(1, Math.floor(x1 - x0));
}

/**
 * Cell geometry (layout.ts's Layout) with the columns placed on the axis: bin
 * c spans from its first step to the next bin's first (the last bin to its
 * last step + 1), so a gap between logged steps belongs to the bin before it.
 */
export function axisLayout(
  widthCss: number,
  rows: number,
  colStart: readonly number[],
  colEnd: readonly number[],
  axis: StepRange,
  rowHeightCss: number,
  dpr: number,
): Layout {
  const w = Math.max(1, Math.round(widthCss * dpr));
  const cols = colStart.length;
  const px = (step: number) => Math.round(axisX(axis, w, step));
  const xEdges = new Int32Array(cols + 1);
  for (let c = 0; c < cols; c++) xEdges[c] = px(colStart[c]);
  if (cols > 0) xEdges[cols] = px(colEnd[cols - 1] + 1);
  for (let c = 1; c <= cols; c++) if (xEdges[c] < xEdges[c - 1]) xEdges[c] = xEdges[c - 1];
  return { ...computeLayout(widthCss, rows, cols, rowHeightCss, dpr), xEdges };
}

/** Tick steps of the axis (round numbers) and their x (css px, the middle of the step). */
export function axisTicks(axis: StepRange, widthCss: number, target: number): { step: number; x: number }[] {
  const half = widthCss / Math.max(1, axis.end - axis.start + 1) / 2;
  return niceTicks(axis.start, axis.end, target).map((step) => ({ step, x: axisX(axis, widthCss, step) + half }));
}
