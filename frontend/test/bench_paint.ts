/**
 * Browser benchmark entry (bundled by tests/browser as an IIFE, not shipped):
 * the full heatmap draw of a rows x cols matrix on a real canvas, from values
 * and states to pixels (colour scale, colour indices, layout, paint, and a
 * 1-pixel readback that forces the deferred canvas work to finish).
 */
import { buildPalette, colorIndices, computeScale } from "../src/colormap";
import { computeLayout } from "../src/layout";
import { paintHeatmap } from "../src/paint";

export function benchPaint(rows: number, cols: number, widthCss: number, rowHeightCss: number, repeats: number): number[] {
  const n = rows * cols;
  const values = new Float32Array(n);
  const states = new Uint8Array(n);
  let seed = 7;
  const rand = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  for (let i = 0; i < n; i++) {
    values[i] = 10 ** (-6 + 6 * rand());
    states[i] = rand() < 0.02 ? 1 + Math.floor(rand() * 14) : 0;
  }
  const palette = buildPalette(Array.from({ length: 15 }, (_, code) => ({ code, name: `s${code}`, severity: "error" as const })));
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
    const t1 = performance.now();
    const idx = colorIndices(scale, values, states);
    const t2 = performance.now();
    paintHeatmap(ctx, layout, idx, palette);
    const t3 = performance.now();
    ctx.getImageData(0, 0, 1, 1);
    times.push(performance.now() - t0);
    (globalThis as unknown as { phases: number[][] }).phases ??= [];
    (globalThis as unknown as { phases: number[][] }).phases.push([t1 - t0, t2 - t1, t3 - t2, performance.now() - t3]);
  }
  canvas.remove();
  return times;
}
(globalThis as unknown as { benchPaint: typeof benchPaint }).benchPaint = benchPaint;
