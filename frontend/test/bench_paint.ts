/**
 * Browser entry for the big-heatmap draw (bundled as an IIFE by
 * tests/browser/check_tab.mjs and benchmarks/frontend_draw.mjs, not shipped):
 * the full heatmap draw of a rows x cols matrix on a real canvas, from values
 * and states to pixels (colour scale, colour indices, layout, paint, and a
 * 1-pixel readback that forces the deferred canvas work to finish).
 *
 * Returns the time of each draw (ms; the first one is cold) and, read back
 * after the last draw and outside the timings, what the canvas shows.
 */
import { colorIndices, computeScale } from "../src/colormap";
import { computeLayout } from "../src/layout";
import { paintHeatmap } from "../src/paint";
import { testPalette, worstCaseMatrix } from "./fixtures";

export interface BenchResult {
  times: number[];
  /** Non-transparent pixels after the last draw, of `pixels`. */
  painted: number;
  /** Distinct colours among them (counted up to 64). */
  colours: number;
  pixels: number;
}

export function benchPaint(rows: number, cols: number, widthCss: number, rowHeightCss: number, repeats: number): BenchResult {
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
  const data = canvas.getContext("2d")!.getImageData(0, 0, canvas.width, canvas.height).data;
  let painted = 0;
  const colours = new Set<number>();
  for (let i = 0; i < data.length; i += 4) {
    if (data[i + 3] === 0) continue;
    painted++;
    if (colours.size < 64) colours.add((data[i] << 16) | (data[i + 1] << 8) | data[i + 2]);
  }
  const pixels = canvas.width * canvas.height;
  canvas.remove();
  return { times, painted, colours: colours.size, pixels };
}
(globalThis as unknown as { benchPaint: typeof benchPaint }).benchPaint = benchPaint;
