// Page states and stale answers of the tab against the mock backend
// (tests/browser/mock_server.mjs, docs/API.md shapes): loading -> ready,
// empty (no runs), error (server error), a slow answer that a newer
// request superseded must be dropped, and the tables of states and metrics:
// the server's when meta sends them, the built-in ones when it does not.
// Run by tests/test_browser.py.
// Environment: CHROMIUM (default /usr/bin/chromium). Exits 1 on failure.
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", "..", "frontend", "package.json"));
const { chromium } = require("playwright-core");

function check(cond, what, detail = "") {
  if (!cond) throw new Error(`FAILED: ${what}${detail ? `\n  ${detail}` : ""}`);
  console.log(`ok - ${what}`);
}

const server = spawn(process.execPath, [path.join(here, "mock_server.mjs"), "0"], { stdio: ["ignore", "pipe", "inherit"] });
const port = await new Promise((resolve, reject) => {
  server.stdout.on("data", (d) => {
    const m = String(d).match(/listening (\d+)/);
    if (m) resolve(Number(m[1]));
  });
  server.on("exit", (code) => reject(new Error(`mock server exited ${code}`)));
});
const base = `http://127.0.0.1:${port}/`;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
});
let code = 0;
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const stateOf = () => page.getAttribute(".nd-root", "data-state");

  // loading is visible first while the (slow) heatmap is on its way, then ready.
  await page.goto(`${base}?mode=stale`);
  await page.waitForSelector(".nd-root");
  const first = await stateOf();
  check(first === "loading", `first state is loading (${first})`);
  await page.waitForSelector(".nd-root[data-state=ready]", { timeout: 60000 });
  check(true, "then ready");

  // Stale answers: zoom in (fast answer), show all (slow answer), zoom in
  // again (fast): the slow one arrives last and must not be drawn.
  // (Waits for the slow request to end, answered or cancelled, not for a
  // time: a busy machine is slow to draw.)
  const zoomIn = () => page.click(".nd-toolbar button[aria-label='Zoom in (+)']");
  await zoomIn();
  await page.waitForFunction(() => !document.querySelector(".nd-panel .nd-panel-sub").textContent.startsWith("steps 0–299"), null, { timeout: 60000 });
  const slowEnded = new Promise((resolve) => {
    const ended = (r) => {
      if (r.url().includes("/heatmap?") && !r.url().includes("start=")) resolve();
    };
    page.on("requestfinished", ended);
    page.on("requestfailed", ended);
  });
  await page.click(".nd-toolbar button[aria-label='Show all steps']");
  await page.waitForTimeout(150);
  await zoomIn();
  await Promise.race([slowEnded, page.waitForTimeout(60000)]);
  await page.waitForTimeout(500);  // (a slow answer wrongly kept would be drawn by now)
  const head = await page.textContent(".nd-panel .nd-panel-sub");
  const range = await page.textContent(".nd-range");
  check(range.includes("zoomed") && !head.startsWith("steps 0–299"), `a superseded slow answer is dropped (toolbar: ${range}; drawn: ${head})`);

  // Device pixel ratio 2: a sharp canvas (2 device px per css px) and hit
  // testing in css px still finds the row under the mouse.
  const hidpi = await browser.newPage({ viewport: { width: 1280, height: 800 }, deviceScaleFactor: 2 });
  await hidpi.goto(base);
  await hidpi.waitForSelector(".nd-root[data-state=ready]", { timeout: 60000 });
  const ratio = await hidpi.$eval(".nd-canvas", (c) => c.width / c.getBoundingClientRect().width);
  check(Math.abs(ratio - 2) < 0.01, `devicePixelRatio 2: canvas has 2 device px per css px (${ratio.toFixed(3)})`);
  const label = hidpi.locator(".nd-panel .nd-label").nth(3);
  const lb = await label.boundingBox();
  const cb = await hidpi.locator(".nd-panel .nd-canvas").boundingBox();
  await hidpi.mouse.move(cb.x + cb.width * 0.4, lb.y + lb.height / 2, { steps: 3 });
  const title = await hidpi.locator(".nd-tooltip div").first().textContent();
  const name = await label.getAttribute("data-layer");
  check(title.startsWith(name), `devicePixelRatio 2: hover finds the row under the mouse (${title})`);
  await hidpi.close();

  // Tables: an older server (no tables in meta) draws with the built-in ones...
  // Queried and read in one evaluation: with $$eval the items are found first and
  // read in a second call, and a legend re-rendered in between leaves detached
  // items without a computed colour (a flaky "Cannot read properties of null").
  const legend = (p) => p.evaluate(() => [...document.querySelectorAll(".nd-legend-list li")].map((li) => {
    const rgb = getComputedStyle(li.querySelector(".nd-swatch")).backgroundColor.match(/\d+/g).map(Number);
    return { text: li.textContent.trim(), color: `#${rgb.map((v) => v.toString(16).padStart(2, "0")).join("")}` };
  }));
  const builtin = await legend(page);
  const vanishing = builtin.find((x) => x.text === "vanishing gradient");
  check(vanishing?.color === "#9b8cff" && builtin.at(-1).text === "no data" && builtin.at(-1).color === "#f3f4f6",
    `without tables in meta: the built-in colours and labels (${JSON.stringify([vanishing, builtin.at(-1)])})`);
  // ... and a server that sends its tables draws with those: legend, toolbar, canvas.
  await page.goto(`${base}?mode=tables`);
  await page.waitForSelector(".nd-root[data-state=ready]", { timeout: 60000 });
  const served = await page.evaluate(() => fetch("./meta?run=vanishing_sigmoid").then((r) => r.json()));
  await page.waitForFunction(() => document.querySelector(".nd-toolbar select option").textContent === "Server gradient norm", null, { timeout: 60000 });
  const want = served.states.filter((s) => s.code !== 0).map((s) => s.label).sort();
  // The legend follows the toolbar: wait for it (a miss is reported by the checks below).
  await page.waitForFunction((w) => JSON.stringify([...document.querySelectorAll(".nd-legend-list li")]
    .map((li) => li.textContent.trim()).filter((t) => t !== "no data").sort()) === w, JSON.stringify(want),
    { timeout: 60000 }).catch(() => {});
  const shown = await legend(page);
  check(JSON.stringify(shown.slice(0, -1).map((x) => x.text).sort()) === JSON.stringify(want),
    `with tables in meta: the legend lists the server's labels (${shown.length - 1})`);
  check(shown.every((x) => x.text === "no data" ? x.color === served.colors.no_data : served.states.some((s) => s.label === x.text && s.color === x.color)),
    "with tables in meta: the legend has the server's colours", JSON.stringify(shown));
  const legendTitle = await page.textContent(".nd-legend-title");
  check(legendTitle === "Server gradient norm, healthy cells", `the server's metric label and scale (linear: no "log scale"): ${legendTitle}`);
  const vanishingColor = served.states.find((s) => s.name === "vanishing").color;
  const onCanvas = await page.$eval(".nd-canvas", (c, hex) => {
    const want = parseInt(hex.slice(1), 16);
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    for (let i = 0; i < d.length; i += 4) if (d[i + 3] && ((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]) === want) return true;
    return false;
  }, vanishingColor);
  check(onCanvas, `the heatmap paints vanishing cells in the server's colour (${vanishingColor})`);

  await page.goto(`${base}?mode=empty`);
  await page.waitForSelector(".nd-root[data-state=empty]", { timeout: 60000 });
  check((await page.textContent(".nd-state-screen")).includes("No NeuralDbg data"), "empty state explains how to record data");

  await page.goto(`${base}?mode=error`);
  await page.waitForSelector(".nd-root[data-state=error]", { timeout: 60000 });
  const text = await page.textContent(".nd-state-screen");
  check(text.includes("500") && text.includes("boom"), "error state shows the server's answer");
  mkdirSync(path.join(here, "screenshots"), { recursive: true });
  await page.screenshot({ path: path.join(here, "screenshots", "state_error.png") });
  check(errors.length === 0, "no uncaught errors", errors.join("\n  "));
} catch (e) {
  console.log(String(e.stack ?? e));
  code = 1;
} finally {
  await browser.close();
  server.kill();
}
process.exit(code);
