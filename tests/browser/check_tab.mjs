// Browser test of the NeuralDbg tab in a REAL TensorBoard (driven by
// tests/test_browser.py, which writes the logdir, runs `neuraldbg report
// --json` and starts `tensorboard`). Headless Debian chromium through
// playwright-core (from frontend/node_modules).
//
// Environment:
//   ND_TB_URL        http://127.0.0.1:PORT (a running tensorboard)
//   ND_REPORT        path of `neuraldbg report LOGDIR --json` output (ground truth)
//   ND_SHOTS         folder for screenshots (tests/browser/screenshots)
//   ND_RESULTS       optional: where to write measured figures as JSON
//   ND_FOCUS_RUN     optional: the failing run to exercise in depth (default: first failing)
//   ND_UNTRUSTED_RUN optional: a run whose names/messages are HTML; must render as text
//   CHROMIUM         optional: chromium binary (default /usr/bin/chromium)
// Prints one line per check; exits 1 on the first failure.
import { createRequire } from "node:module";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const frontend = path.resolve(here, "..", "..", "frontend");
const require = createRequire(path.join(frontend, "package.json"));
const { chromium } = require("playwright-core");
const esbuild = require("esbuild");

const env = process.env;
const TB = env.ND_TB_URL;
const report = JSON.parse(readFileSync(env.ND_REPORT, "utf8"));
const shots = env.ND_SHOTS ?? path.join(here, "screenshots");
mkdirSync(shots, { recursive: true });
const results = { paint_ms: {}, checks: 0 };
const READY_TIMEOUT = 60000;

function check(cond, what, detail = "") {
  if (!cond) throw new Error(`FAILED: ${what}${detail ? `\n  ${detail}` : ""}`);
  results.checks++;
  console.log(`ok - ${what}`);
}

const key = (e) => `${e.step}|${e.layer}|${e.kind}`;
const sameMultiset = (a, b) => JSON.stringify([...a].sort()) === JSON.stringify([...b].sort());
/** "steps 10–99 (zoomed)" -> [10, 99]; "step 5" -> [5, 5]. */
const parseRange = (t) => {
  const m = t.match(/(\d+)(?:–(\d+))?/);
  return m ? [Number(m[1]), Number(m[2] ?? m[1])] : [NaN, NaN];
};
const safeName = (s) => s.replace(/[^A-Za-z0-9_.-]+/g, "_").slice(0, 60);

const browser = await chromium.launch({
  executablePath: env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
});
let exitCode = 0;
try {
  const page = await browser.newPage({ viewport: { width: 1440, height: 960 } });
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  const requests = [];
  page.on("request", (r) => requests.push(r.url()));

  // ---- open the tab ---------------------------------------------------------
  const t0 = Date.now();
  await page.goto(`${TB}/#neuraldbg`);
  const iframeEl = await page.waitForSelector("iframe", { timeout: READY_TIMEOUT });
  const frame = await iframeEl.contentFrame();
  await frame.waitForSelector(".nd-root[data-state=ready]", { timeout: READY_TIMEOUT });
  results.ready_ms = Date.now() - t0;
  check(true, `tab ready in ${results.ready_ms} ms`);

  const shown = await frame.$$eval(".nd-runitem", (els) => els.map((e) => e.getAttribute("data-run")));
  check(sameMultiset(shown, report.runs.map((r) => r.run)), "run list = runs of `neuraldbg report --json`", `${shown} vs ${report.runs.map((r) => r.run)}`);

  /** Show only `run` and wait until its heatmap and event list are drawn. */
  async function showRun(run) {
    await frame.evaluate((run) => {
      const item = [...document.querySelectorAll(".nd-runitem")].find((e) => e.getAttribute("data-run") === run);
      item.querySelector(".nd-runname").click();
    }, run);
    await frame.waitForFunction(
      (run) => {
        const panels = [...document.querySelectorAll(".nd-panel")];
        const ev = document.querySelector("[data-testid=events]");
        return (
          document.querySelector(".nd-root").getAttribute("data-state") === "ready" &&
          panels.length === 1 && panels[0].getAttribute("data-run") === run && panels[0].hasAttribute("data-paint-ms") &&
          ev.getAttribute("data-run") === run
        );
      },
      run,
      { timeout: READY_TIMEOUT },
    );
    return frame.$(".nd-panel");
  }

  /** Pixels of the heatmap canvas: [painted, distinct colours]. */
  const canvasStats = (panel) =>
    panel.$eval(".nd-canvas", (c) => {
      const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
      let painted = 0;
      const colours = new Set();
      for (let i = 0; i < d.length; i += 4) {
        if (d[i + 3] === 0) continue;
        painted++;
        if (colours.size < 64) colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
      }
      return [painted, colours.size, c.width * c.height];
    });

  // ---- every run: heatmap drawn, root cause and events agree with the report
  for (const r of report.runs) {
    const panel = await showRun(r.run);
    const [painted, colours, total] = await canvasStats(panel);
    check(painted > total * 0.05 && colours >= 2, `${r.run}: heatmap drawn (${painted}/${total} px, ${colours}+ colours)`);
    results.paint_ms[r.run] = Number(await panel.getAttribute("data-paint-ms"));
    const roots = await panel.$$eval("[data-root-cause]", (els) => els.map((e) => e.getAttribute("data-root-cause")));
    const want = r.root_cause ? [r.root_cause.layer] : [];
    check(JSON.stringify(roots) === JSON.stringify(want), `${r.run}: highlighted root-cause row = ${want[0] ?? "none"}`, `got ${JSON.stringify(roots)}`);
    if (r.root_cause) {
      const label = await panel.$eval("[data-root-cause]", (e) => e.textContent);
      check(r.root_cause.layer.endsWith(label.replace(/^…/, "")) && label.length > 0, `${r.run}: root-cause label shows the layer name (${label})`);
      const panelText = await frame.$eval(".nd-rootcause", (e) => e.textContent);
      check(panelText.includes(r.root_cause.layer) && panelText.includes(`step ${r.root_cause.step}`), `${r.run}: root-cause panel names layer and step`);
      const onset = await panel.$eval(".nd-onset", (e) => e.style.display !== "none");
      check(onset, `${r.run}: onset cell marked`);
    }
    const items = await frame.$$eval(".nd-event", (els) => els.map((e) => ({
      step: Number(e.getAttribute("data-step")), layer: e.getAttribute("data-layer"), kind: e.getAttribute("data-kind"), root: e.hasAttribute("data-root"),
    })));
    const expected = r.events.slice(0, 1000);
    check(sameMultiset(items.map(key), expected.map(key)), `${r.run}: event list = report events (${expected.length})`,
      `ui ${JSON.stringify(items.map(key))}\n  report ${JSON.stringify(expected.map(key))}`);
    // The root cause may be attributed to a layer without an event of its own
    // (e.g. <optimizer> for a learning-rate failure): tag exactly the matching events.
    const rc = r.root_cause;
    const isRoot = (e) => !!rc && e.layer === rc.layer && e.step === rc.step && e.kind === rc.kind;
    check(sameMultiset(items.filter((e) => e.root).map(key), expected.filter(isRoot).map(key)),
      `${r.run}: root-cause event tagged in the list (${expected.filter(isRoot).length})`);
    await page.screenshot({ path: path.join(shots, `run_${safeName(r.run)}.png`) });
  }

  // ---- untrusted strings render as text ----------------------------------------
  if (env.ND_UNTRUSTED_RUN) {
    await showRun(env.ND_UNTRUSTED_RUN);
    const injected = await frame.evaluate(() => ({
      imgs: document.querySelectorAll(".nd-root img, .nd-root script:not([type]), .nd-root b.evil").length,
      hacked: window.__nd_hacked === true,
      text: document.body.textContent.includes("<img"),
    }));
    check(injected.imgs === 0 && !injected.hacked && injected.text, "HTML in layer names and messages is shown as text, never parsed");
  }

  // ---- the focus run in depth -----------------------------------------------------
  const focus = report.runs.find((r) => r.run === env.ND_FOCUS_RUN) ?? report.runs.find((r) => r.root_cause && r.run !== env.ND_UNTRUSTED_RUN);
  check(!!focus, "a failing run to exercise");
  const rc = focus.root_cause;
  let panel = await showRun(focus.run);
  const [fullA, fullB] = parseRange(await frame.$eval(".nd-range", (e) => e.textContent));
  const labels = await panel.$$eval(".nd-label", (els) => els.map((e) => e.getAttribute("data-layer")));

  // Hover: tooltip with layer and state; no repaint on mouse move.
  const paintCount = () => frame.locator(".nd-panel").getAttribute("data-paint-count");
  let paintBefore = await paintCount();
  for (let stable = 0; stable < 3; ) {
    await page.waitForTimeout(200);
    const now = await paintCount();
    stable = now === paintBefore ? stable + 1 : 0;
    paintBefore = now;
  }
  // Locators re-resolve: panels re-render while the app refetches.
  const cbox = await frame.locator(".nd-panel .nd-canvas").boundingBox();
  const labelBox = (i) => frame.locator(".nd-panel .nd-label").nth(i).boundingBox();
  const rootRow = labels.indexOf(rc.layer);
  const lb = await labelBox(rootRow);
  await page.mouse.move(cbox.x + cbox.width * 0.9, lb.y + lb.height / 2, { steps: 3 });
  await frame.waitForSelector(".nd-tooltip", { state: "visible" });
  const tip = await frame.$eval(".nd-tooltip", (e) => [...e.children].map((c) => c.textContent));
  for (const f of [0.1, 0.3, 0.5, 0.7]) await page.mouse.move(cbox.x + cbox.width * f, cbox.y + cbox.height * f, { steps: 4 });
  check((await paintCount()) === paintBefore, `moving the mouse over the heatmap does not repaint it (paints: ${paintBefore})`);
  check(tip[0].startsWith(rc.layer) && /^steps? \d/.test(tip[1]) && tip.some((t) => t.startsWith("state: ")), `tooltip shows layer, steps, state: ${JSON.stringify(tip)}`);

  // Click a cell -> layer detail of that row.
  const otherRow = rootRow > 0 ? rootRow - 1 : rootRow + 1;
  const ob = await labelBox(otherRow);
  await page.mouse.click(cbox.x + cbox.width * 0.5, ob.y + ob.height / 2);
  await frame.waitForSelector(`[data-testid=layer-detail][data-state=ready]`, { timeout: READY_TIMEOUT });
  const detailLayer = await frame.$eval("[data-testid=layer-detail]", (e) => e.getAttribute("data-layer"));
  check(detailLayer === labels[otherRow], `click a cell -> detail of ${labels[otherRow]}`, `got ${detailLayer}`);
  const chartPx = await frame.$eval(".nd-chart", (c) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i]) n++;
    return n;
  });
  check(chartPx > 500, `detail chart drawn (${chartPx} px)`);
  check((await paintCount()) === paintBefore, `opening a layer did not repaint the heatmap (paints: ${paintBefore})`);

  // Big runs: heatmaps come as base64 float32, the layer route reads only the series shown.
  const heatmapUrls = requests.filter((u) => u.includes("/heatmap?"));
  check(heatmapUrls.length > 0 && heatmapUrls.every((u) => new URL(u).searchParams.get("format") === "b64"), `heatmaps asked with format=b64 (${heatmapUrls.length})`);
  const layerMetrics = () => requests.filter((u) => u.includes("/layer?")).map((u) => new URL(u).searchParams.getAll("metric"));
  check(layerMetrics().length > 0 && layerMetrics().every((ms) => ms.length === 1), `layer detail asks for one metric at a time: ${JSON.stringify(layerMetrics())}`);

  // Keyboard: the cursor moves with the arrows, Enter opens the layer.
  await frame.focus(".nd-canvas");
  await page.keyboard.press("ArrowDown");
  await page.keyboard.press("Enter");
  await frame.waitForFunction((want) => {
    const d = document.querySelector("[data-testid=layer-detail]");
    return d.getAttribute("data-layer") === want && d.getAttribute("data-state") === "ready";
  }, labels[otherRow + 1], { timeout: READY_TIMEOUT });
  check(true, `keyboard: ArrowDown + Enter -> detail of ${labels[otherRow + 1]}`);

  // A module row's detail: the series menu fetches a series on demand, just that one.
  const modRow = labels.findIndex((n, i) => i > 0 && !n.startsWith("<"));
  if (modRow > 0) {
    const mb = await labelBox(modRow);
    await page.mouse.click(cbox.x + cbox.width * 0.5, mb.y + mb.height / 2);
    await frame.waitForFunction((want) => {
      const d = document.querySelector("[data-testid=layer-detail]");
      return d.getAttribute("data-layer") === want && d.getAttribute("data-state") === "ready";
    }, labels[modRow], { timeout: READY_TIMEOUT });
    check(layerMetrics().every((ms) => ms.length === 1), `detail of ${labels[modRow]} asks for one metric at a time: ${JSON.stringify(layerMetrics())}`);
    const options = await frame.$$eval("[data-testid=layer-detail] select option", (os) => os.map((o) => [o.value, o.selected]));
    const pick = options.map(([v]) => v).filter((v) => !layerMetrics().flat().includes(v)).pop();
    if (pick) {
      const before = layerMetrics().length;
      await frame.selectOption("[data-testid=layer-detail] select", pick);
      await frame.waitForFunction(() => document.querySelector("[data-testid=layer-detail]").getAttribute("data-state") === "ready", null, { timeout: READY_TIMEOUT });
      const asked = layerMetrics().slice(before);
      check(asked.length === 1 && asked[0][0] === pick, `picking the detail series ${pick} fetches just that one (${JSON.stringify(asked)})`);
      check((await frame.$eval("[data-testid=layer-detail] select", (e) => e.value)) === pick, `detail shows ${pick}`);
    }
  }

  // Event list hover points the heatmap at the event's cell.
  if (focus.events.length) {
    await frame.hover(".nd-event");
    const pointer = await frame.$eval(".nd-panel .nd-pointer", (e) => e.style.display !== "none");
    check(pointer, "hovering an event points at its cell");
  }

  // Jump there: zoom around the onset, root-cause layer opened.
  await frame.click(".nd-rootcause button");
  await frame.waitForFunction((layer) => {
    const d = document.querySelector("[data-testid=layer-detail]");
    return d.getAttribute("data-layer") === layer && d.getAttribute("data-state") === "ready";
  }, rc.layer, { timeout: READY_TIMEOUT });
  await page.waitForTimeout(400);
  const rangeText = await frame.$eval(".nd-range", (e) => e.textContent);
  const [a, b] = parseRange(rangeText);
  check(a <= rc.step && rc.step <= b && (rangeText.includes("zoomed") || fullB - fullA <= 24),
    `jump there shows the onset, zoomed in (${rangeText}; all: ${fullA}–${fullB})`);
  await page.screenshot({ path: path.join(shots, "jump_there.png") });

  // Wheel zoom re-queries binned data.
  await frame.click(".nd-toolbar button[aria-label='Show all steps']");
  await frame.waitForFunction(() => !document.querySelector(".nd-range").textContent.includes("zoomed"));
  const heatmapsBefore = requests.filter((u) => u.includes("/heatmap?")).length;
  await page.mouse.move(cbox.x + cbox.width * 0.5, cbox.y + 5);
  await page.mouse.wheel(0, -300);
  await frame.waitForFunction(() => document.querySelector(".nd-range").textContent.includes("zoomed"), null, { timeout: READY_TIMEOUT });
  await page.waitForTimeout(500);
  const heatmapsAfter = requests.filter((u) => u.includes("/heatmap?")).length;
  check(heatmapsAfter > heatmapsBefore && requests.filter((u) => u.includes("/heatmap?")).pop().includes("start="), "wheel zoom re-queries the heatmap for the new step range");
  const zoomedRange = await frame.$eval(".nd-range", (e) => e.textContent);

  // TensorBoard's reload button -> experimental.DataReloaded -> refetch, zoom kept.
  const runsBefore = requests.filter((u) => u.endsWith("/runs")).length;
  await page.click("button.reload-button");
  for (let i = 0; i < 600 && requests.filter((u) => u.endsWith("/runs")).length <= runsBefore; i++) await page.waitForTimeout(100);
  await frame.waitForFunction(() => document.querySelector(".nd-root").getAttribute("data-state") === "ready");
  await page.waitForTimeout(1500);
  const runsAfter = requests.filter((u) => u.endsWith("/runs")).length;
  check(runsAfter > runsBefore, "TensorBoard reload refetches (experimental.DataReloaded)");
  check((await frame.$eval(".nd-range", (e) => e.textContent)) === zoomedRange, `reload keeps the zoom (${zoomedRange})`);

  // Drag pans: moving the image right shows earlier steps.
  const [z0] = parseRange(zoomedRange);
  if (z0 > fullA) {
    const box = await frame.locator(".nd-panel .nd-canvas").boundingBox();
    await page.mouse.move(box.x + box.width * 0.5, box.y + box.height * 0.5);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width * 0.7, box.y + box.height * 0.5, { steps: 5 });
    await page.mouse.up();
    await frame.waitForFunction((z0) => {
      const m = document.querySelector(".nd-range").textContent.match(/(\d+)/);
      return m && Number(m[1]) < z0;
    }, z0, { timeout: READY_TIMEOUT });
    check(true, `drag pans to earlier steps (${await frame.$eval(".nd-range", (e) => e.textContent)})`);
  }

  // Metric selector.
  await frame.selectOption(".nd-toolbar select", "state");
  await frame.waitForFunction(() => document.querySelector(".nd-legend-title")?.textContent.includes("healthy") && !document.querySelector(".nd-legend-ramp"));
  await page.waitForTimeout(300);
  panel = await frame.$(".nd-panel");
  const [sp] = await canvasStats(panel);
  check(sp > 0 && requests.some((u) => u.includes("metric=state")), "metric = state redraws the heatmap");
  await frame.selectOption(".nd-toolbar select", "grad_norm");

  // Side by side: a second run next to the first.
  const second = report.runs.find((r) => r.run !== focus.run && r.run !== env.ND_UNTRUSTED_RUN);
  if (second) {
    await frame.evaluate((run) => {
      const item = [...document.querySelectorAll(".nd-runitem")].find((e) => e.getAttribute("data-run") === run);
      item.querySelector("input[type=checkbox]").click();
    }, second.run);
    await frame.waitForFunction(() => {
      const panels = [...document.querySelectorAll(".nd-panel")];
      return panels.length === 2 && panels.every((p) => p.getAttribute("data-metric") === "grad_norm" && !p.hasAttribute("data-busy"));
    }, null, { timeout: READY_TIMEOUT });
    check(true, `compare: ${focus.run} and ${second.run} side by side`);
    await page.screenshot({ path: path.join(shots, "compare.png"), fullPage: true });
    await showRun(focus.run);
  }

  // README screenshot: the focus run with its root cause, a layer open.
  await frame.click(".nd-toolbar button[aria-label='Show all steps']");
  await page.waitForTimeout(300);
  await frame.click(".nd-rootcause button");
  await frame.waitForSelector("[data-testid=layer-detail][data-state=ready]");
  await page.mouse.move(0, 0);
  await page.waitForTimeout(500);
  await page.screenshot({ path: path.join(shots, "readme.png"), fullPage: true });

  check(pageErrors.length === 0, "no uncaught errors in the page", pageErrors.join("\n  "));

  // ---- big heatmap: 1,000 layers x 2,000 columns drawn on a real canvas ----------
  // Only that it is drawn (every group expanded: a row per layer); its draw
  // time is benchmarks/frontend_draw.mjs's job.
  const bench = await esbuild.build({
    entryPoints: [path.join(frontend, "test", "bench_paint.ts")], bundle: true, format: "iife", write: false, logLevel: "warning",
  });
  const bpage = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await bpage.setContent("<!doctype html><body></body>");
  await bpage.addScriptTag({ content: bench.outputFiles[0].text });
  const big = await bpage.evaluate(() => globalThis.benchDraw("expanded", 1000, 2000, 2000, 1));
  check(big.painted > big.pixels * 0.05 && big.colours >= 2 && big.rows > 1000,
    `1000 x 2000 heatmap drawn (${big.rows} rows, ${big.painted}/${big.pixels} px, ${big.colours}+ colours)`);
} catch (e) {
  console.log(String(e.stack ?? e));
  exitCode = 1;
} finally {
  await browser.close();
  if (env.ND_RESULTS) writeFileSync(env.ND_RESULTS, JSON.stringify(results, null, 2));
  console.log(`results: ${JSON.stringify(results)}`);
}
process.exit(exitCode);
