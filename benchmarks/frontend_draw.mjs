// Draw-time benchmark of the heatmap: a 1,000 x 2,000 matrix (values over six
// decades, 2% failing cells: the worst case for painting by colour bucket)
// drawn on a real canvas in headless chromium, from values and states to
// pixels. Prints the first (cold) draw and the median, min and max of the
// warm ones. Target: a warm median under 100 ms.
//
//     node benchmarks/frontend_draw.mjs [--rows 1000] [--cols 2000] [--repeats 9]
//
// Needs frontend/node_modules (`npm ci` in frontend/) and chromium (CHROMIUM,
// else /usr/bin/chromium). The draw is frontend/test/bench_paint.ts, the same
// one tests/browser/check_tab.mjs checks for pixels.
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
  },
});
const rows = Number(opts.rows);
const cols = Number(opts.cols);
const repeats = Math.max(2, Number(opts.repeats));

const bundle = await esbuild.build({
  entryPoints: [path.join(frontend, "test", "bench_paint.ts")], bundle: true, format: "iife", write: false, logLevel: "warning",
});
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
});
try {
  // The viewport and CSS sizes of tests/browser/check_tab.mjs: 2,000 CSS px wide, 2 px rows.
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await page.setContent("<!doctype html><body></body>");
  await page.addScriptTag({ content: bundle.outputFiles[0].text });
  const r = await page.evaluate(([rows, cols, repeats]) => globalThis.benchPaint(rows, cols, 2000, 2, repeats), [rows, cols, repeats]);
  const warm = r.times.slice(1).sort((a, b) => a - b);
  const ms = (t) => `${t.toFixed(1)} ms`;
  console.log(`heatmap draw, ${rows} x ${cols} on a ${r.pixels} px canvas (${r.painted} px painted), headless chromium`);
  console.log(`  first draw   ${ms(r.times[0])}`);
  console.log(`  warm median  ${ms(warm[Math.floor(warm.length / 2)])} (min ${ms(warm[0])}, max ${ms(warm[warm.length - 1])}, ${warm.length} draws)`);
} finally {
  await browser.close();
}
