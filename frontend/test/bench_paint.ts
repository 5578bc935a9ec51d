/**
 * Browser entry for the big-heatmap draw (bundled as an IIFE by
 * tests/browser/check_tab.mjs and benchmarks/frontend_draw.mjs, not shipped):
 * the tab's whole draw of a transformer of `rows` layers x `cols` columns on
 * a real canvas, from the server's binned matrix to pixels, with the code
 * the tab runs (app.ts draw -> HeatmapPanel.update): colour scale, rows of
 * the module tree (rowmodel.ts: tree, expansion, groups), colour indices
 * (rowcolors.ts), layout, paint, and a 1-pixel readback that forces the
 * deferred canvas work to finish.
 *
 * `view`: "collapsed" opens as the tab does (the root cause's branch), or
 * "expanded" (every group open: a row per layer, plus the bands).
 *
 * The phases of the tab: the module tree is built when the run's meta
 * comes (`treeMs`), before the heatmap is asked for; with `warm`, the tab's
 * warm-up (warmup.ts) runs while that request is in flight (`warmMs`); then
 * the heatmap comes and is drawn. Returns the time of each full draw (ms;
 * the first one is cold: run it on a fresh page), each from a new heatmap
 * answer (as after a reload: nothing cached but the compiled code); then of
 * toggling one group (what a click costs); and, read back after the last
 * draw, what the canvas shows.
 */
import { computeScale } from "../src/colormap";
import { computeLayout, rowHeightFor } from "../src/layout";
import { paintHeatmap } from "../src/paint";
import { RowColors } from "../src/rowcolors";
import { RowModel } from "../src/rowmodel";
import { BUILTIN_TABLES } from "../src/tables";
import { defaultExpansion } from "../src/tree";
import { TreeState } from "../src/treestate";
import { warmUpDraw } from "../src/warmup";
import type { Heatmap, Meta } from "../src/types";
import { testPalette, transformerLayers, worstCaseMatrix } from "./fixtures";

export interface BenchResult {
  rows: number;
  treeMs: number;
  warmMs: number;
  times: number[];
  toggles: number[];
  /** Non-transparent pixels after the last draw, of `pixels`. */
  painted: number;
  /** Distinct colours among them (counted up to 64). */
  colours: number;
  pixels: number;
}

export const ROOT_CAUSE = "blocks.37.mlp.fc1";

export function benchDraw(
  view: "collapsed" | "expanded", layers: number, cols: number, widthCss: number, repeats: number, toggles = 0, warm = false,
): BenchResult {
  const list = transformerLayers(layers);
  const { values, states } = worstCaseMatrix(list.length, cols, 7);
  const meta = { run: "bench", layers: list, metrics: [], states: [], metric_info: null, colors: {}, first_step: 0, last_step: cols - 1, num_steps: cols } as Meta;
  const answer = (): Heatmap => ({
    run: "bench", metric: "grad_norm", rows: list.length, cols, layers: list.map((l) => l.name),
    colStart: Array.from({ length: cols }, (_, c) => c), colEnd: Array.from({ length: cols }, (_, c) => c), values, states,
  });
  const palette = testPalette();
  const tables = BUILTIN_TABLES;
  const rowState = new TreeState();
  if (view === "expanded") rowState.setAll(true);
  const model = new RowModel();
  const colors = new RowColors();
  const canvas = document.createElement("canvas");
  document.body.append(canvas);
  const rc = { kind: "exploding_gradient", layer: ROOT_CAUSE, step: 40, message: "" };
  let t = performance.now();
  const tree = model.tree(list.map((l) => l.name));
  const treeMs = performance.now() - t;
  t = performance.now();
  if (warm) warmUpDraw(tables.states, palette);
  const warmMs = performance.now() - t;
  const auto = defaultExpansion(tree, [ROOT_CAUSE]);
  let rows = 0;
  const draw = (heatmap: Heatmap): void => {
    const scale = computeScale("log", [heatmap]);
    const v = model.view({ heatmap, meta, events: [], rootCause: rc, states: tables.states, kind: "log", state: rowState, auto });
    rows = v.rows;
    const dpr = window.devicePixelRatio || 1;
    // The panel's sizes: rows of at most 640 css px in all, within [2, 20] px.
    const layout = computeLayout(widthCss, v.rows, cols, rowHeightFor(v.rows, 640), dpr);
    // As the panel does: the backing store is resized only when the size changes.
    if (canvas.width !== layout.xEdges[cols]) canvas.width = layout.xEdges[cols];
    if (canvas.height !== layout.yEdges[v.rows]) canvas.height = layout.yEdges[v.rows];
    const ctx = canvas.getContext("2d")!;
    paintHeatmap(ctx, layout, colors.indices(v, scale), palette);
    ctx.getImageData(0, 0, 1, 1);
  };
  const times: number[] = [];
  let heatmap = answer();
  for (let k = 0; k < repeats; k++) {
    heatmap = answer();
    const t0 = performance.now();
    draw(heatmap);
    times.push(performance.now() - t0);
  }
  const toggleTimes: number[] = [];
  for (let k = 0; k < toggles; k++) {
    rowState.toggle("blocks.[10…19]", view === "collapsed" ? k % 2 === 0 : k % 2 === 1);
    const t0 = performance.now();
    draw(heatmap);
    toggleTimes.push(performance.now() - t0);
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
  return { rows, treeMs, warmMs, times, toggles: toggleTimes, painted, colours: colours.size, pixels };
}
(globalThis as unknown as { benchDraw: typeof benchDraw }).benchDraw = benchDraw;
