// Every cell explained (issue 44), in a REAL TensorBoard on the demo logdir
// (driven by tests/test_browser_cells.py): skipped steps, sampled metrics,
// rows without the metric, the map's onsets against the events, the banner's
// title and advice, the <optimizer> root cause's cells and the onset marker.
// Headless Debian chromium through playwright-core (frontend/node_modules).
//
// Environment:
//   ND_TB_URL   http://127.0.0.1:PORT (a running tensorboard on the demo logdir)
//   ND_REPORT   path of `neuraldbg report LOGDIR --json` output (ground truth)
//   ND_SHOTS    folder for screenshots (tests/browser/screenshots)
//   CHROMIUM    optional: chromium binary (default /usr/bin/chromium)
// Prints one line per check; exits 1 on the first failure.
import { mkdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { check, TIMEOUT as READY, withBrowser } from "./harness.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));

const env = process.env;
const TB = env.ND_TB_URL;
const report = JSON.parse(readFileSync(env.ND_REPORT, "utf8"));
const shots = env.ND_SHOTS ?? path.join(here, "screenshots");
mkdirSync(shots, { recursive: true });
const SKIPPED_TEXT = "skipped by GradScaler (inf/NaN gradients)";

const runOf = (name) => report.runs.find((r) => r.run === name);

await withBrowser(async (browser) => {
  const page = await browser.newPage({ viewport: { width: 1440, height: 960 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(`${TB}/#neuraldbg`);
  const frame = await (await page.waitForSelector("iframe", { timeout: READY })).contentFrame();
  await frame.waitForSelector(".nd-root[data-state=ready]", { timeout: READY });

  /** Show `run` alone with `metric` and wait until it is painted. */
  async function show(run, metric) {
    await frame.evaluate((run) => {
      const item = [...document.querySelectorAll(".nd-runitem")].find((e) => e.getAttribute("data-run") === run);
      item.querySelector(".nd-runname").click();
    }, run);
    await frame.selectOption(".nd-toolbar select", metric);
    await frame.waitForFunction(
      ([run, metric]) => {
        const p = document.querySelectorAll(".nd-panel");
        return p.length === 1 && p[0].getAttribute("data-run") === run && p[0].getAttribute("data-metric") === metric &&
          p[0].hasAttribute("data-paint-ms") && document.querySelector(".nd-root").getAttribute("data-state") === "ready";
      },
      [run, metric],
      { timeout: READY },
    );
    await page.mouse.move(0, 0);
    await page.waitForTimeout(300);
  }

  /** The heatmap answer the tab draws, fetched from inside the tab. */
  const heatmap = (run, metric) =>
    frame.evaluate(async ([run, metric]) => (await fetch(`./heatmap?run=${encodeURIComponent(run)}&metric=${metric}&max_cols=1000`)).json(), [run, metric]);

  /** Tooltip lines of the cell of `layer` at column `col` (of `cols`). */
  async function tooltipAt(layer, col, cols) {
    const box = await frame.locator(".nd-panel .nd-canvas").boundingBox();
    const label = await frame.locator(`.nd-panel .nd-label[data-layer="${layer}"]`).boundingBox();
    await page.mouse.move(box.x + ((col + 0.5) * box.width) / cols, label.y + label.height / 2, { steps: 2 });
    await frame.waitForSelector(".nd-tooltip", { state: "visible" });
    return frame.$eval(".nd-tooltip", (e) => [...e.children].map((c) => c.textContent));
  }

  const shot = async (name) => {
    await page.screenshot({ path: path.join(shots, `cells_${name}.png`) });
    console.log(`   screenshot cells_${name}.png`);
  };

  // ---- 1a. steps a GradScaler skipped ----------------------------------------
  await show("amp_scaler", "grad_norm");
  const amp = await heatmap("amp_scaler", "grad_norm");
  const skippedCol = amp.skipped.findIndex((n) => n > 0);
  check(skippedCol >= 0, `amp_scaler: the server names skipped steps (${amp.skipped.filter((n) => n).length} columns)`);
  const notes = await frame.getAttribute(".nd-panel", "data-notes");
  check(/skipped=[1-9]/.test(notes), `amp_scaler: skipped columns are hatched (${notes})`);
  const skipTip = await tooltipAt("fc1", skippedCol, amp.cols);
  check(skipTip.includes(SKIPPED_TEXT), `skipped step ${amp.col_start[skippedCol]}: tooltip says so`, JSON.stringify(skipTip));
  check(!skipTip.some((t) => t.startsWith("Gradient norm") || t === "state: healthy"), "a skipped step is not healthy, 'no data' nor a held value", JSON.stringify(skipTip));
  await shot("skipped");

  // ---- 1b. rows without the metric say why ------------------------------------
  const relu = amp.layers.indexOf("relu1");
  check(amp.empty[relu] === "no parameters" && amp.empty[amp.layers.indexOf("<input>")] === "pseudo-layer",
    `rows without a gradient norm say why: ${JSON.stringify(amp.layers.map((l, i) => [l, amp.empty[i]]))}`);
  const reluTip = await tooltipAt("relu1", 5, amp.cols);
  check(reluTip.includes("Gradient norm: none (no parameters)"), "relu1's tooltip: no parameters", JSON.stringify(reluTip));
  await shot("empty_rows");

  // ---- 1c. a metric sampled every N steps is held ---------------------------
  await show("vanishing", "act_std");
  const van = await heatmap("vanishing", "act_std");
  const tanh3 = van.layers.indexOf("tanh3");
  check(van.every[tanh3] === 10, `vanishing act_std: tanh3 sampled every ${van.every[tanh3]} steps`);
  const heldCol = van.col_start.findIndex((s) => s > 10 && s % 10 !== 0);
  const heldTip = await tooltipAt("tanh3", heldCol, van.cols);
  check(heldTip.some((t) => t.includes("(held from the last sample)")) && heldTip.includes("sampled every 10 steps"),
    `step ${van.col_start[heldCol]} between samples: held value, "sampled every 10 steps"`, JSON.stringify(heldTip));
  check(/held=[1-9]/.test(await frame.getAttribute(".nd-panel", "data-notes")), "held cells are painted");
  await shot("sampled");

  // ---- 2. the map agrees with the events --------------------------------------
  for (const r of report.runs) {
    const hm = await heatmap(r.run, "state");
    const firstEvent = new Map();
    for (const e of r.events) if (e.severity !== "info" && e.to_state !== "healthy" && !firstEvent.has(e.layer)) firstEvent.set(e.layer, e.step);
    for (const [layer, step] of firstEvent) {
      const row = hm.layers.indexOf(layer);
      const cells = hm.states.slice(row * hm.cols, (row + 1) * hm.cols);
      const c = cells.findIndex((s) => s !== 0 && s !== 255);
      check(c >= 0 && hm.col_start[c] === step, `${r.run}: ${layer}'s first failing cell is its event's step ${step}`,
        `first failing cell at ${c >= 0 ? hm.col_start[c] : "none"}`);
    }
  }
  await show("vanishing", "state");
  const onsetTip = await tooltipAt("fc1", 0, (await heatmap("vanishing", "state")).cols);
  check(onsetTip.includes("state: vanishing gradient"), "vanishing: fc1 is vanishing at step 0 on the map", JSON.stringify(onsetTip));
  await shot("onset");

  // ---- 3. the banner: title from its cause, advice after "What to try:" -------
  for (const name of ["exploding", "nan_op", "amp_scaler"]) {
    await show(name, "grad_norm");
    const rc = runOf(name).root_cause;
    const head = await frame.$eval(".nd-rootcause-head", (e) => e.textContent);
    const tryLine = await frame.$eval(".nd-rootcause-try", (e) => e.textContent);
    check(tryLine.startsWith("What to try:") && tryLine.length > "What to try:".length + 10 && rc.message.startsWith(tryLine.slice(12, 40)),
      `${name}: "What to try:" is followed by advice: ${tryLine.slice(0, 70)}...`);
    check(!/^What to try:\s*(Seen|Likely cause)/.test(tryLine), `${name}: the advice is not the diagnosis`);
    if (rc.layer === "<optimizer>") {
      check(!/Exploding gradient/.test(head) && /learning rate/i.test(rc.message) && /Learning rate/.test(head),
        `${name}: an <optimizer> cause about the rate is titled "${head}"`);
      await shot("banner");
    }
  }

  // ---- 4. the <optimizer> root cause's cells, one marker, the onset outline -----
  await show("exploding", "grad_norm");
  const ex = await heatmap("exploding", "grad_norm");
  const opt = ex.layers.indexOf("<optimizer>");
  const optStates = ex.states.slice(opt * ex.cols, (opt + 1) * ex.cols);
  const rcStep = runOf("exploding").root_cause.step;
  const rcCol = ex.col_start.indexOf(rcStep);
  check(optStates[rcCol] !== 0 && optStates[rcCol] !== 255, `exploding: <optimizer> has a coloured cell at its onset ${rcStep}`);
  const optTip = await tooltipAt("<optimizer>", rcCol + 20, ex.cols);
  check(optTip.some((t) => t.startsWith("state: ") && t !== "state: healthy" && t !== "state: no data"), "<optimizer>'s later cells are failing", JSON.stringify(optTip));
  await page.mouse.move(0, 0);
  await shot("optimizer");

  for (const r of report.runs.filter((r) => r.root_cause)) {
    await show(r.run, "grad_norm");
    const roots = await frame.$$eval(".nd-event[data-root]", (els) => els.length);
    check(roots === 1, `${r.run}: one root-cause marker in the timeline (${roots})`);
  }

  await show("bad_batch", "grad_norm");
  const bb = await heatmap("bad_batch", "grad_norm");
  const bbCol = bb.col_start.indexOf(runOf("bad_batch").root_cause.step);
  // The cell's own colour still shows inside the onset outline.
  const inside = await frame.evaluate(([col, cols]) => {
    const canvas = document.querySelector(".nd-panel .nd-canvas");
    const label = document.querySelector('.nd-panel .nd-label[data-layer="<input>"]').getBoundingClientRect();
    const box = canvas.getBoundingClientRect();
    const ring = document.querySelector(".nd-panel .nd-onset").getBoundingClientRect();
    const x = box.left + ((col + 0.5) * box.width) / cols;
    const y = label.top + label.height / 2;
    const k = canvas.width / box.width;
    const px = canvas.getContext("2d").getImageData(Math.floor((x - box.left) * k), Math.floor((y - box.top) * k), 1, 1).data;
    const ringAround = ring.left < x && ring.right > x && ring.top < y && ring.bottom > y;
    // the ring's border (2px) lies outside the cell's own columns
    const cellLeft = box.left + (col * box.width) / cols;
    return { rgb: [px[0], px[1], px[2]], ringAround, clear: ring.left + 2 <= cellLeft + 0.5 };
  }, [bbCol, bb.cols]);
  const [rr, gg, b2] = inside.rgb;
  check(inside.ringAround && inside.clear, "bad_batch: the onset marker outlines <input>'s cell at step 100", JSON.stringify(inside));
  check(rr > 150 && gg < 120 && b2 > 80, `bad_batch: <input>'s data-anomaly cell shows inside it (rgb ${inside.rgb})`);
  await shot("onset_outline");

  check(errors.length === 0, "no page errors", errors.join("\n"));
});
