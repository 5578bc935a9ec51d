/**
 * Compile the draw path while the first big heatmap is on its way.
 *
 * A page's first draw of a 1,000 x 2,000 matrix costs several times its
 * later ones: the JavaScript engine first interprets the loops over millions
 * of cells, then compiles them. The app runs this once, right after it asked
 * for a big run's heatmap (the server bins it for a few hundred ms): the same
 * functions, on a small synthetic model, so that they are compiled with the
 * same array types by the time the answer comes. Draws nothing visible.
 */
import { computeScale } from "./colormap";
import { computeLayout } from "./layout";
import { paintHeatmap } from "./paint";
import { RowColors } from "./rowcolors";
import { RowModel } from "./rowmodel";
import type { StateTable } from "./states";
import { defaultExpansion } from "./tree";
import { TreeState } from "./treestate";
import type { Heatmap, Meta } from "./types";

/** Below this many cells a first draw is quick anyway: no warm-up. */
export const WARM_CELLS = 250_000;

const PARTS = ["ln1", "attn.q", "attn.k", "attn.v", "attn.out", "ln2", "mlp.fc1", "mlp.act", "mlp.fc2"];

/** Run the draw path on a synthetic model of ~`rows` x `cols` (a detached canvas); returns the ms spent. */
export function warmUpDraw(states: StateTable, palette: readonly string[], rows = 120, cols = 800): number {
  const t0 = performance.now();
  const names = ["<input>"];
  for (let i = 0; names.length < rows - 1; i++) names.push(`blocks.${Math.floor(i / PARTS.length)}.${PARTS[i % PARTS.length]}`);
  names.push("<loss>");
  const n = names.length * cols;
  const values = new Float32Array(n);
  const codes = new Uint8Array(n);
  // Values over four decades, a few failing and missing cells (cheap to make: no power per cell).
  const decade = Float32Array.from({ length: 97 }, (_, k) => 10 ** (-4 + (4 * k) / 96));
  for (let i = 0; i < n; i++) {
    values[i] = decade[(i * 31) % 97];
    codes[i] = i % 89 === 0 ? 2 : i % 83 === 0 ? 255 : 0;
  }
  const layers = names.map((name) => ({ name, type: "Linear" }));
  const meta = { run: "", layers, metrics: [], states: [], metric_info: null, colors: {}, first_step: 0, last_step: cols - 1, num_steps: cols } as Meta;
  const steps = Array.from({ length: cols }, (_, c) => c);
  const heatmap: Heatmap = { run: "", metric: "", rows: names.length, cols, layers: names, colStart: steps, colEnd: steps, values, states: codes };
  const canvas = document.createElement("canvas");
  const ctx = canvas.getContext("2d");
  const model = new RowModel();
  const colors = new RowColors();
  const auto = defaultExpansion(model.tree(names), [names[Math.floor(rows / 2)]]);
  for (const kind of ["log", "linear"] as const) {
    const scale = computeScale(kind, [heatmap]);
    for (const all of [false, true]) {
      const state = new TreeState();
      if (all) state.setAll(true);
      const view = model.view({ heatmap, meta, events: [], rootCause: null, states, kind, state, auto });
      const idx = colors.indices(view, scale);
      // Cells of one device pixel (expanded) and of several (collapsed): both loops of the pixel painter.
      const layout = computeLayout(all ? cols : cols * 1.5, view.rows, cols, 2, 1);
      canvas.width = layout.xEdges[cols];
      canvas.height = layout.yEdges[view.rows];
      if (ctx) paintHeatmap(ctx, layout, idx, palette);
    }
  }
  return performance.now() - t0;
}
