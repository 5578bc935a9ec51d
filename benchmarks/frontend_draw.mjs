// Draw-time benchmark of the heatmap: a transformer of 1,000 layers x 2,000
// columns (values over six decades, 2% failing cells: the worst case for
// painting), drawn by the tab's own code on a real canvas in headless
// chromium, from the server's binned matrix to pixels: the colour scale,
// the rows of the module tree (expansion, collapsed groups), colour indices,
// paint. Two views: collapsed (as the tab opens: the root cause's branch
// expanded, a few dozen rows) and expanded (every group open: a row per
// layer). Each view on COLD pages (a new browser context each: nothing
// compiled yet), in the tab's order: the module tree is built when the
// run's meta comes, the warm-up (frontend/src/warmup.ts) runs while the
// heatmap request is in flight, then the answer is drawn:
//   first draw     the page's first draw of the answer (target: under 100 ms);
//                  "no warm-up": the same on pages that skip the warm-up
//   warm redraw    later draws of a new answer of the same size, as after a
//                  reload (median, min, max; target: under 50 ms)
//   toggle         expanding or collapsing one group (median)
//
//     node benchmarks/frontend_draw.mjs [--rows 1000] [--cols 2000] [--repeats 9] [--pages 3]
//
// `--pages` repeats each view on that many cold pages (first draws are
// noisy; the machine's other load shows in them). Needs frontend/node_modules
// (`npm ci` in frontend/) and chromium (CHROMIUM, else /usr/bin/chromium).
// The draw is frontend/test/bench_paint.ts, the same one
// tests/browser/check_tab.mjs checks for pixels.
import { createRequire } from "node:module";
import path from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const frontend = path.resolve(here, "..", "frontend");
const require = createRequire(path.join(frontend, "package.json"));
const { chromium } = require("playwright-core");
const esbuild = require("esbuild");

const { values: opts } = parseArgs({
  options: {
    rows: { type: "string", default: "1000" },
    cols: { type: "string", default: "2000" },
    repeats: { type: "string", default: "9" },
    pages: { type: "string", default: "3" },
  },
});
const rows = Number(opts.rows);
const cols = Number(opts.cols);
const repeats = Math.max(2, Number(opts.repeats));
const pages = Math.max(1, Number(opts.pages));

const bundle = await esbuild.build({
  entryPoints: [path.join(frontend, "test", "bench_paint.ts")], bundle: true, format: "iife", write: false, logLevel: "warning",
});
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
});
const ms = (t) => `${t.toFixed(1)} ms`;
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
try {
  console.log(`heatmap draw, transformer of ${rows} layers x ${cols} columns, 2,000 css px wide, headless chromium, cold page per run`);
  for (const view of ["collapsed", "expanded"]) {
    const firsts = { true: [], false: [] };
    const warm = [];
    const toggles = [];
    const trees = [];
    const warmups = [];
    let shown = 0;
    for (let p = 0; p < pages; p++) {
      for (const warmUp of [true, false]) {
        // A new context: a new renderer, nothing compiled or cached from the last page.
        const context = await browser.newContext({ viewport: { width: 2200, height: 900 } });
        const page = await context.newPage();
        await page.setContent("<!doctype html><body></body>");
        await page.addScriptTag({ content: bundle.outputFiles[0].text });
        const r = await page.evaluate(([view, rows, cols, repeats, warmUp]) => globalThis.benchDraw(view, rows, cols, 2000, repeats, 6, warmUp),
          [view, rows, cols, repeats, warmUp]);
        await context.close();
        firsts[warmUp].push(r.times[0]);
        if (!warmUp) continue;
        warm.push(...r.times.slice(1));
        toggles.push(...r.toggles);
        trees.push(r.treeMs);
        warmups.push(r.warmMs);
        shown = r.rows;
      }
    }
    const w = [...warm].sort((a, b) => a - b);
    console.log(`  ${view} (${shown} rows)`);
    console.log(`    first draw   ${firsts.true.map(ms).join(", ")}   (no warm-up: ${firsts.false.map(ms).join(", ")})`);
    console.log(`    warm redraw  median ${ms(median(w))} (min ${ms(w[0])}, max ${ms(w[w.length - 1])}, ${w.length} draws);  toggle a group: median ${ms(median(toggles))}`);
    console.log(`    before it:   module tree ${ms(median(trees))} when the meta comes; warm-up ${ms(median(warmups))} while the heatmap is asked`);
  }
} finally {
  await browser.close();
}
