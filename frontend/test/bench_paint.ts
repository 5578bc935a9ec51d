/**
 * Browser benchmark entry (bundled by tests/browser as an IIFE, not shipped):
 * the full heatmap draw of a rows x cols matrix on a real canvas, from values
 * and states to pixels (colour scale, colour indices, layout, paint, and a
 * 1-pixel readback that forces the deferred canvas work to finish).
 */
import { colorIndices, computeScale } from "../src/colormap";
import { computeLayout } from "../src/layout";
import { paintHeatmap } from "../src/paint";
import { testPalette, worstCaseMatrix } from "./fixtures";

export function benchPaint(rows: number, cols: number, widthCss: number, rowHeightCss: number, repeats: number): number[] {
  const { values, states } = worstCaseMatrix(rows, cols, 7);
  const palette = testPalette();
  const canvas = document.createElement("canvas");
  document.body.append(canvas);
  const times: number[] = [];
  for (let k = 0; k < repeats; k++) {
    const t0 = performance.now();
    const dpr = window.devicePixelRatio || 1;
    const layout = computeLayout(widthCss, rows, cols, rowHeightCss, dpr);
    // As the app does: the backing store is resized only when the size changes.
    if (canvas.width !== layout.xEdges[cols]) canvas.width = layout.xEdges[cols];
    if (canvas.height !== layout.yEdges[rows]) canvas.height = layout.yEdges[rows];
    const ctx = canvas.getContext("2d")!;
    const scale = computeScale("log", [{ values, states }]);
    const idx = colorIndices(scale, values, states);
    paintHeatmap(ctx, layout, idx, palette);
    ctx.getImageData(0, 0, 1, 1);
    times.push(performance.now() - t0);
  }
  canvas.remove();
  return times;
}
(globalThis as unknown as { benchPaint: typeof benchPaint }).benchPaint = benchPaint;
