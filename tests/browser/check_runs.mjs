// Browser test of runs side by side in a real TensorBoard, and of the HTML
// export (driven by tests/test_browser_runs.py, which writes the logdir,
// exports it and starts `tensorboard`): two runs opened from a URL with
// p.neuraldbg.runs=a,b (names holding a comma), one panel each (data-run),
// one step axis (same ticks at the same x, the shorter run's cells stop at
// its last step), the same rows at the same heights (a layer only one run
// has is an empty row in the other), the hover echoed in the other panel,
// zoom shared, the event list and the root cause naming their run, a reload
// keeping them; one run selected is in the URL too; the run list's names
// uncut; the export's layer labels whole names, its event table's names
// wrapping only after a dot, steps ticked along its map's axis.
//
// Environment:
//   ND_TB_URL          http://127.0.0.1:PORT (a running tensorboard)
//   ND_RUN_A, ND_RUN_B the failing run and its shorter healthy twin
//   ND_ONLY_A          optional: a layer only run A has; ND_ONLY_B one only run B has
//   ND_LONG_RUN        optional: a run with a long name
//   ND_EXPORT          optional: the `neuraldbg export` of the logdir, to check
//   ND_HOVER_LAYER     a row of run A to hover (default fc1)
//   ND_SHORTER_B       1: run B logged fewer steps than run A
//   ND_SHOT_NAME       the side-by-side screenshot's file name (default runs.png)
//   ND_SHOTS           folder for screenshots (tests/browser/screenshots)
//   ND_DOCS_SHOT       optional: where to copy the side-by-side screenshot (docs/screenshot_runs.png)
//   CHROMIUM           optional: chromium binary (default /usr/bin/chromium)
// Prints one line per check; exits 1 on the first failure.
import { copyFileSync, mkdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { check, TIMEOUT, withBrowser } from "./harness.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));

const env = process.env;
const TB = env.ND_TB_URL;
const A = env.ND_RUN_A;
const B = env.ND_RUN_B;
const HOVER = env.ND_HOVER_LAYER ?? "fc1";
/** The twin logged fewer steps (synthetic logdir): its cells must stop where its steps do. */
const SHORTER_B = env.ND_SHORTER_B === "1";
const SHOT = env.ND_SHOT_NAME ?? "runs.png";
const shots = env.ND_SHOTS ?? path.join(here, "screenshots");
mkdirSync(shots, { recursive: true });

/** The `p.neuraldbg.runs` value of frontend/src/urlstate.ts: `%` and `,` escaped in each name. */
const encodeRuns = (runs) => runs.map((r) => r.replace(/%/g, "%25").replace(/,/g, "%2C")).join(",");
const decodeRuns = (v) => v.split(",").map(decodeURIComponent);

await withBrowser(async (browser) => {
  const page = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  let frame;

  /** The tab's frame once `n` panels are drawn and none is waiting for data. */
  async function tab(n) {
    frame = await (await page.waitForSelector("iframe", { timeout: TIMEOUT })).contentFrame();
    await frame.waitForSelector(".nd-root[data-state=ready]", { timeout: TIMEOUT });
    await frame.waitForFunction((n) => {
      const ps = [...document.querySelectorAll(".nd-panel")];
      return ps.length === n && ps.every((p) => p.hasAttribute("data-paint-ms") && !p.hasAttribute("data-busy"));
    }, n, { timeout: TIMEOUT });
    await page.waitForTimeout(300); // the frame after the last answer
    return frame;
  }
  /** The runs of the parent page's URL (TensorBoard keeps the tab's state in its hash). */
  const urlRuns = () => page.evaluate(() => {
    const pair = location.hash.slice(1).split("&").find((p) => p.startsWith("p.neuraldbg.runs="));
    return pair ? decodeURIComponent(pair.slice("p.neuraldbg.runs=".length)) : null;
  }).then((v) => (v === null ? null : decodeRuns(v)));
  /** Per panel: run, canvas box, ticks (text, x), rows (id, y relative to the canvas). */
  const panels = () => frame.$$eval(".nd-panel", (ps) => ps.map((p) => {
    const c = p.querySelector(".nd-canvas").getBoundingClientRect();
    return {
      run: p.getAttribute("data-run"),
      canvas: { x: c.x, w: c.width },
      ticks: [...p.querySelectorAll(".nd-tick")].map((t) => ({ text: t.textContent, x: t.getBoundingClientRect().x + t.getBoundingClientRect().width / 2 - c.x })),
      rows: [...p.querySelectorAll(".nd-label")].map((l) => ({ id: l.getAttribute("data-layer"), y: l.getBoundingClientRect().y - c.y })),
    };
  }));
  /** Alpha of a panel's canvas at a fraction of its width, on the row of `id`. */
  const alphaAt = (run, id, fx) => frame.evaluate(([run, id, fx]) => {
    const p = [...document.querySelectorAll(".nd-panel")].find((e) => e.getAttribute("data-run") === run);
    const canvas = p.querySelector(".nd-canvas");
    const lb = [...p.querySelectorAll(".nd-label")].find((l) => l.getAttribute("data-layer") === id).getBoundingClientRect();
    const cb = canvas.getBoundingClientRect();
    const sx = canvas.width / cb.width;
    return canvas.getContext("2d").getImageData(Math.floor(cb.width * fx * sx), Math.floor((lb.top + lb.height / 2 - cb.top) * sx), 1, 1).data[3];
  }, [run, id, fx]);
  const near = (a, b) => Math.abs(a - b) <= 1;
  /** (In the page) per element: its text and the character ending each of its lines but the last. */
  const lineBreaks = (els) => els.map((box) => {
    const chars = [];
    const walk = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      for (let i = 0; i < n.textContent.length; i++) {
        const r = document.createRange();
        r.setStart(n, i);
        r.setEnd(n, i + 1);
        chars.push({ ch: n.textContent[i], top: Math.round(r.getBoundingClientRect().top) });
      }
    }
    const breaks = [];
    for (let i = 1; i < chars.length; i++) if (chars[i].top > chars[i - 1].top) breaks.push(chars[i - 1].ch);
    return { name: box.textContent, breaks };
  });

  // ---- two runs from a link: p.neuraldbg.runs=a,b (a name holds a comma) ----
  await page.goto(`${TB}/#neuraldbg&p.neuraldbg.runs=${encodeURIComponent(encodeRuns([A, B]))}`);
  await tab(2);
  let ps = await panels();
  check(JSON.stringify(ps.map((p) => p.run)) === JSON.stringify([A, B]), `the link opens ${A} and ${B}, one panel each (data-run), in its order`,
    JSON.stringify(ps.map((p) => p.run)));
  const [pa, pb] = ps;
  const paintMs = await frame.$$eval(".nd-panel", (els) => els.map((e) => e.getAttribute("data-paint-ms")));
  console.log(`# paint ms per panel (not asserted): ${paintMs.join(", ")}`);
  const boxes = await frame.$$eval(".nd-panel", (els) => els.map((e) => e.getBoundingClientRect()).map((r) => ({ x: r.x, y: r.y, h: r.height })));
  check(near(boxes[0].x, boxes[1].x) && boxes[1].y >= boxes[0].y + boxes[0].h - 1, "the panels are one above the other");

  // ---- one step axis ----
  check(near(pa.canvas.x, pb.canvas.x) && near(pa.canvas.w, pb.canvas.w), `same plot column in both (x ${pa.canvas.x.toFixed(1)}, width ${pa.canvas.w.toFixed(1)})`);
  check(pa.ticks.length >= 3 && JSON.stringify(pa.ticks.map((t) => t.text)) === JSON.stringify(pb.ticks.map((t) => t.text)) &&
    pa.ticks.every((t, i) => near(t.x, pb.ticks[i].x)), `same step ticks at the same x: ${pa.ticks.map((t) => t.text).join(" ")}`);
  if (SHORTER_B) {
    check(Number(pa.ticks.at(-1).text) > 119, "the axis spans the longer run (200 steps) in both panels");
    check((await alphaAt(A, "fc0", 0.9)) > 0 && (await alphaAt(B, "fc0", 0.9)) === 0 && (await alphaAt(B, "fc0", 0.5)) > 0,
      `${B} (120 steps) is drawn up to its last step and empty after it; ${A} (200) goes on`);
  }

  // ---- the same rows at the same heights ----
  check(JSON.stringify(pa.rows.map((r) => r.id)) === JSON.stringify(pb.rows.map((r) => r.id)) && pa.rows.every((r, i) => near(r.y, pb.rows[i].y)),
    `the same ${pa.rows.length} rows in the same order at the same heights`, JSON.stringify([pa.rows.map((r) => r.id), pb.rows.map((r) => r.id)]));
  const ids = pa.rows.map((r) => r.id);
  if (env.ND_ONLY_A) {
    check(ids.includes(env.ND_ONLY_A) && ids.includes(env.ND_ONLY_B), `a layer only one run has is a row in both (${env.ND_ONLY_A}, ${env.ND_ONLY_B})`);
    check((await alphaAt(B, env.ND_ONLY_A, 0.3)) === 0 && (await alphaAt(A, env.ND_ONLY_A, 0.3)) > 0 &&
      (await alphaAt(A, env.ND_ONLY_B, 0.3)) === 0 && (await alphaAt(B, env.ND_ONLY_B, 0.3)) > 0, "and an empty one where the run lacks it");
    const subs = await frame.$$eval(".nd-panel-sub", (els) => els.map((e) => e.textContent));
    check(subs[0].endsWith("11 rows of 10 layers") && subs[1].endsWith("11 rows of 10 layers"), `each head counts its run's own layers: ${subs.join(" | ")}`);
    const absent = await frame.$$eval(".nd-panel .nd-label-absent", (els) => els.map((e) => [e.closest(".nd-panel").getAttribute("data-run"), e.getAttribute("data-layer"), e.title]));
    check(JSON.stringify(absent.map((a) => a.slice(0, 2))) === JSON.stringify([[A, env.ND_ONLY_B], [B, env.ND_ONLY_A]]) && absent.every((a) => a[2].includes("not in run")),
      "whose label says it is not in that run", JSON.stringify(absent));
  }

  // Anomalies first: one order for both panels (the earliest onset in either run).
  await frame.click(".nd-order button[data-order=onset]");
  await frame.waitForFunction(() => [...document.querySelectorAll(".nd-panel")].every((p) => p.querySelector(".nd-label")?.getAttribute("data-layer") !== "<input>"), null, { timeout: TIMEOUT });
  await tab(2);
  const [oa, ob] = await panels();
  check(JSON.stringify(oa.rows.map((r) => r.id)) === JSON.stringify(ob.rows.map((r) => r.id)) && oa.rows.every((r, i) => near(r.y, ob.rows[i].y)),
    `anomalies first: the same order in both panels (${oa.rows.slice(0, 3).map((r) => r.id).join(", ")}, …)`);
  await frame.click(".nd-order button[data-order=forward]");
  await frame.waitForFunction(() => document.querySelector(".nd-panel .nd-label")?.getAttribute("data-layer") === "<input>", null, { timeout: TIMEOUT });
  await tab(2);

  // ---- hover echoed, zoom shared ----
  const cellBox = async (run, id, fx) => {
    const p = frame.locator(`.nd-panel[data-run="${run.replace(/"/g, '\\"')}"]`);
    const lb = await p.locator(`.nd-label[data-layer="${id}"]`).boundingBox();
    const cb = await p.locator(".nd-canvas").boundingBox();
    return [cb.x + cb.width * fx, lb.y + lb.height / 2];
  };
  await page.mouse.move(...(await cellBox(A, HOVER, 0.25)), { steps: 2 });
  await frame.waitForSelector(`.nd-panel[data-run="${B.replace(/"/g, '\\"')}"] .nd-echo-col`, { state: "visible", timeout: TIMEOUT });
  const echo = await frame.$$eval(".nd-panel", (els) => els.map((p) => {
    const top = p.querySelector(".nd-canvas").getBoundingClientRect().top;
    const box = (sel) => {
      const e = p.querySelector(sel);
      if (e.style.display === "none") return null;
      const r = e.getBoundingClientRect();
      return { x: r.x, mid: r.y + r.height / 2 - top };
    };
    return { hover: box(".nd-hover"), col: box(".nd-echo-col"), cell: box(".nd-echo") };
  }));
  check(echo[0].hover && echo[1].col && echo[1].cell && Math.abs(echo[1].col.x - (echo[0].hover.x + 1)) <= 2 && near(echo[1].cell.mid, echo[0].hover.mid),
    "hovering a cell of one run marks the same step and row in the other", JSON.stringify(echo));
  await page.mouse.move(0, 0);
  await frame.click(".nd-toolbar button[aria-label='Zoom in (+)']");
  await page.waitForTimeout(400);
  await tab(2);
  const zoomed = await panels();
  check(zoomed[0].ticks.map((t) => t.text).join() !== pa.ticks.map((t) => t.text).join() &&
    JSON.stringify(zoomed[0].ticks) === JSON.stringify(zoomed[1].ticks), `zoom moves both panels together: ${zoomed[0].ticks.map((t) => t.text).join(" ")}`);
  await frame.click(".nd-toolbar button[aria-label='Show all steps']");
  await tab(2);

  // ---- the event list and the root cause say whose they are ----
  const evRun = await frame.$eval("[data-testid=events]", (e) => [e.getAttribute("data-run"), e.querySelector("[data-testid=events-run]").textContent]);
  check(evRun[0] === A && evRun[1].includes(A), `the event list names its run: "${evRun[1]}"`);
  const head = await frame.$eval(".nd-rootcause", (e) => e.textContent);
  check(head.includes(A), `the root cause names its run: "${head.slice(0, 80)}"`);

  // ---- the URL keeps them: a reload opens the same runs ----
  check(JSON.stringify(await urlRuns()) === JSON.stringify([A, B]), "the URL holds both runs");
  await page.mouse.move(0, 0);
  const shot = path.join(shots, SHOT);
  await page.screenshot({ path: shot });
  if (env.ND_DOCS_SHOT) copyFileSync(shot, env.ND_DOCS_SHOT);
  await page.reload();
  await tab(2);
  check(JSON.stringify((await panels()).map((p) => p.run)) === JSON.stringify([A, B]), "a reload keeps both runs");

  // ---- one run: in the URL too ----
  await frame.evaluate((run) => [...document.querySelectorAll(".nd-runitem")].find((e) => e.getAttribute("data-run") === run).querySelector(".nd-runname").click(), B);
  await tab(1);
  check(JSON.stringify(await urlRuns()) === JSON.stringify([B]), `one run selected: the URL names it (${B})`);
  await page.reload();
  await tab(1);
  check((await frame.$eval(".nd-panel", (p) => p.getAttribute("data-run"))) === B, "a reload opens that run");
  const single = (await panels())[0];
  if (env.ND_ONLY_A) check(!single.rows.some((r) => r.id === env.ND_ONLY_A), "alone, a run shows only its own rows");

  // ---- the run list: names uncut ----
  const names = await frame.$$eval(".nd-runitem", (els) => els.map((e) => {
    const t = e.querySelector(".nd-runname-text");
    const card = e.closest("section").getBoundingClientRect();
    const r = t.getBoundingClientRect();
    return { run: e.getAttribute("data-run"), text: t.textContent, title: t.getAttribute("title"), fits: t.scrollWidth <= t.clientWidth + 1 && r.right <= card.right };
  }));
  check(names.length >= 3 && names.every((n) => n.text === n.run && n.title === n.run && n.fits), "the run list shows every name whole",
    JSON.stringify(names));
  const runWraps = await frame.$$eval(".nd-runname-text", lineBreaks);
  const sep = "/_-.,= ";
  check((!env.ND_LONG_RUN || runWraps.some((w) => w.name === env.ND_LONG_RUN && w.breaks.length > 0)) && runWraps.every((w) => w.breaks.every((c) => sep.includes(c))),
    "a long name wraps after a separator, never inside a word", JSON.stringify(runWraps));
  await frame.$eval("[aria-label=Runs]", (e) => e.scrollIntoView());
  await (await frame.$("[aria-label=Runs]")).screenshot({ path: path.join(shots, "run_list.png") });
  check(pageErrors.length === 0, "no uncaught errors in the tab", pageErrors.join("\n  "));

  if (env.ND_EXPORT) {
    // ---- the HTML export: whole names, ticks along the map ----
    const doc = await browser.newPage({ viewport: { width: 640, height: 900 } });
    await doc.goto(pathToFileURL(env.ND_EXPORT).href);
    const labels = await doc.$$eval("svg text.layer", (els) => els.map((e) => ({ title: e.querySelector("title").textContent, text: [...e.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join("") })));
    const whole = (l) => l.text === l.title || (l.text.startsWith("…") && l.title.endsWith(`.${l.text.slice(1)}`));
    check(labels.length >= 8 && labels.every(whole), `the map's ${labels.length} labels are whole names (or their last whole segments)`,
      JSON.stringify(labels.filter((l) => !whole(l))));
    const ticks = await doc.$$eval("svg", (svgs) => svgs.map((s) => [...s.querySelectorAll("text.tick")].map((t) => Number(t.textContent))));
    // Round: evenly 1, 2 or 5 times a power of ten apart, each a multiple of that.
    const round = (t) => {
      const d = t[1] - t[0];
      const m = d / 10 ** Math.floor(Math.log10(d));
      return [1, 2, 5].includes(m) && t.every((v, i) => v % d === 0 && (i === 0 || v - t[i - 1] === d));
    };
    check(ticks.length === 3 && ticks.every((t) => t.length >= 4 && round(t)), `each map labels round steps along its axis: ${JSON.stringify(ticks)}`);
    // Where an event's layer name wraps, the line ends with a dot of its path.
    const wraps = await doc.$$eval("code.name", lineBreaks);
    const wrapped = wraps.filter((w) => w.breaks.length > 0);
    check(wrapped.length > 0 && wrapped.every((w) => w.breaks.every((c) => c === ".")), `layer names wrap only after a dot (${wrapped.length} wrapped: ${wrapped[0]?.name})`,
      JSON.stringify(wraps.filter((w) => w.breaks.some((c) => c !== "."))));
    check(wraps.some((w) => w.name === "<optimizer>" && w.breaks.length === 0), "<optimizer> stays whole");
    await doc.screenshot({ path: path.join(shots, "export.png"), fullPage: true });
  }
});
