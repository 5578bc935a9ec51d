// Browser test of the tab on a BIG model in a real TensorBoard (driven by
// tests/test_browser.py, which writes the logdir and starts `tensorboard`):
// a 56-block transformer (510 rows) failing in blocks.37.mlp.fc1, and a
// healthy run of the same model. Checks the module tree (opens collapsed
// with the root cause's branch expanded, collapsed groups hold the worst
// state of their rows, click and keyboard expand and collapse, the
// expansion survives TensorBoard's reload and a page reload), the filter and
// the anomalies-first order (and that both survive a page reload through
// the URL), the run list's one-line summaries, and saves a screenshot of
// each view.
//
// Environment:
//   ND_TB_URL     http://127.0.0.1:PORT (a running tensorboard)
//   ND_RUN        the failing run; ND_ROOT its root-cause layer; ND_HEALTHY the healthy run
//   ND_SHOTS      folder for screenshots (tests/browser/screenshots)
//   ND_DOCS_SHOT  optional: where to copy the tree screenshot (docs/screenshot.png)
//   CHROMIUM      optional: chromium binary (default /usr/bin/chromium)
// Prints one line per check; exits 1 on the first failure.
import { createRequire } from "node:module";
import { copyFileSync, mkdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", "..", "frontend", "package.json"));
const { chromium } = require("playwright-core");

const env = process.env;
const TB = env.ND_TB_URL;
const RUN = env.ND_RUN;
const ROOT = env.ND_ROOT;
const HEALTHY = env.ND_HEALTHY;
const shots = env.ND_SHOTS ?? path.join(here, "screenshots");
mkdirSync(shots, { recursive: true });
const TIMEOUT = 60000;

function check(cond, what, detail = "") {
  if (!cond) throw new Error(`FAILED: ${what}${detail ? `\n  ${detail}` : ""}`);
  console.log(`ok - ${what}`);
}

const browser = await chromium.launch({
  executablePath: env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
});
let exitCode = 0;
try {
  const page = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  let frame;

  /** The tab's frame once it is drawn (after a load or a reload). */
  async function tab() {
    frame = await (await page.waitForSelector("iframe", { timeout: TIMEOUT })).contentFrame();
    await frame.waitForSelector(".nd-root[data-state=ready]", { timeout: TIMEOUT });
    await frame.waitForSelector(".nd-panel[data-paint-ms]", { timeout: TIMEOUT });
    return frame;
  }
  /** The labels shown: [{id, kind, level, root, title, text}] top to bottom. */
  const labels = () =>
    frame.$$eval(".nd-panel .nd-label", (els) => els.map((e) => ({
      id: e.getAttribute("data-layer"), kind: e.getAttribute("data-kind"), level: Number(e.getAttribute("aria-level")),
      root: e.getAttribute("data-root-cause"), title: e.getAttribute("title"), text: e.textContent,
      active: e.classList.contains("nd-label-active"),
    })));
  const kindOf = async (id) => (await labels()).find((l) => l.id === id)?.kind;
  /** Wait until the rows shown satisfy `pred` (a function of the label list, run in the page). */
  const rowsUntil = (pred, arg) =>
    frame.waitForFunction(([src, arg]) => {
      const ls = [...document.querySelectorAll(".nd-panel .nd-label")].map((e) => ({
        id: e.getAttribute("data-layer"), kind: e.getAttribute("data-kind"), level: Number(e.getAttribute("aria-level")), title: e.getAttribute("title"),
      }));
      return new Function("ls", "arg", `return (${src})(ls, arg)`)(ls, arg);
    }, [pred.toString(), arg], { timeout: TIMEOUT });
  const label = (id) => frame.locator(`.nd-panel .nd-label[data-layer="${id}"]`);
  const parentHash = () => page.evaluate(() => decodeURIComponent(location.hash));

  // ---- open on the failing run: collapsed, the root cause's branch expanded ----
  await page.goto(`${TB}/#neuraldbg`);
  await page.evaluate(() => localStorage.clear());
  await page.reload();
  await tab();
  check((await frame.$eval(".nd-panel", (p) => p.getAttribute("data-run"))) === RUN, `opens on the failing run ${RUN}`);
  let ls = await labels();
  const rows = Number(await frame.$eval(".nd-panel", (p) => p.getAttribute("data-rows")));
  const total = await frame.$eval(".nd-panel-sub", (e) => e.textContent);
  check(rows === ls.length && rows >= 10 && rows <= 60 && total.includes("of 510 layers"), `510 layers open as ${rows} rows (${total})`);
  check(JSON.stringify(ls.filter((l) => l.level === 1).map((l) => l.id)) ===
    JSON.stringify(["<input>", "embed", "blocks", "ln_f", "head", "<loss>", "<optimizer>"]), "top level: pseudo-layers, embed, blocks, ln_f, head",
    JSON.stringify(ls.filter((l) => l.level === 1).map((l) => l.id)));
  const branch = ["blocks", "blocks.[30…39]", "blocks.37", "blocks.37.mlp"];
  check(branch.every((id) => ls.find((l) => l.id === id)?.kind === "open"), `the root cause's branch is expanded: ${branch.join(" > ")}`);
  const root = ls.filter((l) => l.root);
  check(root.length === 1 && root[0].id === ROOT && root[0].root === ROOT && root[0].kind === "leaf" && root[0].text.endsWith("fc1"),
    `the root-cause row ${ROOT} is shown and marked`, JSON.stringify(root));
  check(["blocks.[0…9]", "blocks.36", "blocks.37.attn", "blocks.[50…55]"].every((id) => ls.find((l) => l.id === id)?.kind === "group"),
    "the other groups are collapsed");
  check(await frame.$eval(".nd-panel .nd-onset", (e) => e.style.display !== "none"), "the onset cell is marked");

  // A collapsed group holds the worst state of its rows: blocks.[0…9] (blocks.5.ln1
  // saturates from step 60) is painted in the saturated colour at the right end of its row.
  const served = await frame.evaluate((run) => fetch(`./meta?run=${encodeURIComponent(run)}`).then((r) => r.json()), RUN);
  const saturated = served.states.find((s) => s.name === "saturated").color;
  const colourAt = (id, fx) => frame.evaluate(([id, fx]) => {
    const lab = document.querySelector(`.nd-panel .nd-label[data-layer="${id}"]`);
    const canvas = document.querySelector(".nd-panel .nd-canvas");
    const lb = lab.getBoundingClientRect();
    const cb = canvas.getBoundingClientRect();
    const sx = canvas.width / cb.width;
    const d = canvas.getContext("2d").getImageData(Math.floor(cb.width * fx * sx), Math.floor((lb.top + lb.height / 2 - cb.top) * sx), 1, 1).data;
    return `#${[d[0], d[1], d[2]].map((v) => v.toString(16).padStart(2, "0")).join("")}`;
  }, [id, fx]);
  const G = "blocks.[0…9]";
  check((await colourAt(G, 0.95)) === saturated && (await colourAt(G, 0.2)) !== saturated,
    `collapsed group ${G} shows its worst state (${saturated}) where blocks.5.ln1 saturates, not before`);
  const cellOf = async (id, fx) => {
    const lb = await label(id).boundingBox();
    const cb = await frame.locator(".nd-panel .nd-canvas").boundingBox();
    return [cb.x + cb.width * fx, lb.y + lb.height / 2];
  };
  await page.mouse.move(...(await cellOf(G, 0.95)), { steps: 2 });
  await frame.waitForSelector(".nd-tooltip", { state: "visible" });
  const tip = await frame.$eval(".nd-tooltip", (e) => [...e.children].map((c) => c.textContent));
  check(tip[0] === `${G} · worst of 90 layers` && tip.includes("from blocks.5.ln1"), `the group's tooltip names the layer it shows: ${JSON.stringify(tip)}`);
  await page.mouse.move(0, 0);
  await page.screenshot({ path: path.join(shots, "tree_collapsed.png") });

  // ---- expand and collapse: click, keyboard, a click on a group's cell ----
  const R = "blocks.[10…19]";
  await label(R).click();
  await rowsUntil((ls) => ls.some((l) => l.id === "blocks.15" && l.kind === "group"));
  check((await kindOf(R)) === "open", `click on a collapsed group's label expands it (blocks.10 … blocks.19 shown)`);
  await page.keyboard.press("-");
  await rowsUntil((ls, R) => ls.find((l) => l.id === R).kind === "group" && !ls.some((l) => l.id === "blocks.15"), R);
  check(true, "keyboard: - collapses the focused group");
  await page.keyboard.press("+");
  await rowsUntil((ls, R) => ls.find((l) => l.id === R).kind === "open", R);
  await page.keyboard.press("ArrowRight"); // to the first child
  await page.keyboard.press("Enter"); // expands blocks.10
  await rowsUntil((ls) => ls.find((l) => l.id === "blocks.10")?.kind === "open");
  check(true, "keyboard: + expands, ArrowRight goes to the first child, Enter expands it");
  await page.keyboard.press("ArrowLeft");
  await rowsUntil((ls) => ls.find((l) => l.id === "blocks.10")?.kind === "group");
  check(await frame.evaluate(() => document.activeElement?.getAttribute("data-layer") === "blocks.10"), "keyboard: ArrowLeft collapses, the focus stays on the row");
  // A click on a collapsed group's failing cell expands it, the cursor on what holds the layer that decided the cell.
  await page.mouse.click(...(await cellOf(G, 0.95)));
  await rowsUntil((ls, G) => ls.find((l) => l.id === G)?.kind === "open", G);
  await frame.waitForFunction(() => document.querySelector(".nd-panel .nd-label-active")?.getAttribute("data-layer") === "blocks.5", null, { timeout: TIMEOUT });
  check(true, "a click on a group's failing cell expands it; the cursor goes to blocks.5, which holds the culprit");
  await page.screenshot({ path: path.join(shots, "tree_expanded.png") });

  // The expansion survives TensorBoard's reload (DataReloaded) and a page reload.
  await page.click("button.reload-button");
  await page.waitForTimeout(1500);
  await tab();
  const kept = async () => (await kindOf(G)) === "open" && (await kindOf(R)) === "open" && (await kindOf("blocks.10")) === "group";
  check(await kept(), "TensorBoard reload keeps the expansion");
  await page.reload();
  await tab();
  check(await kept(), "a page reload keeps the expansion (localStorage)");

  // ---- the filter: part of a name or a module type; in the URL; survives a reload ----
  await frame.fill(".nd-filter", "LayerNorm");
  await frame.press(".nd-filter", "Enter");
  await rowsUntil((ls) => ls.filter((l) => l.kind === "leaf").length === 113);
  ls = await labels();
  const leaves = ls.filter((l) => l.kind === "leaf");
  check(leaves.every((l) => l.title.includes("(LayerNorm)")), `filter LayerNorm keeps the ${leaves.length} LayerNorm rows (2 a block and ln_f)`);
  check(ls.filter((l) => l.kind !== "leaf").every((l) => l.id.startsWith("blocks")) && !ls.some((l) => l.id === "<input>" || l.id === "head"),
    "with their ancestors as context, nothing else");
  check((await parentHash()).includes("p.neuraldbg.filter=LayerNorm"), `the URL keeps the filter (${await parentHash()})`);
  const countText = await frame.$eval(".nd-rowcount", (e) => e.textContent);
  check(countText.includes("113 of 510 layers match"), `the count says so: ${countText}`);
  await page.screenshot({ path: path.join(shots, "tree_filter.png") });
  await page.reload();
  await tab();
  check((await frame.$eval(".nd-filter", (e) => e.value)) === "LayerNorm" && (await labels()).filter((l) => l.kind === "leaf").length === 113,
    "a reload restores the filter from the URL");
  await frame.fill(".nd-filter", "blocks.37.mlp.fc");
  await frame.press(".nd-filter", "Enter");
  await rowsUntil((ls) => JSON.stringify(ls.filter((l) => l.kind === "leaf").map((l) => l.id)) === JSON.stringify(["blocks.37.mlp.fc1", "blocks.37.mlp.fc2"]));
  check(true, "filter by part of a name: blocks.37.mlp.fc -> fc1, fc2");
  await frame.fill(".nd-filter", "");
  await frame.press(".nd-filter", "Enter");
  await rowsUntil((ls) => ls.some((l) => l.id === "<input>"));
  check(!(await parentHash()).includes("p.neuraldbg.filter"), "clearing the filter clears it from the URL");

  // ---- anomalies first: failing rows on top in onset order; in the URL ----
  const topLevel = async () => (await labels()).filter((l) => l.level === 1).map((l) => l.id);
  await frame.click(".nd-order button[data-order=onset]");
  await rowsUntil((ls) => ls[0].id === "blocks");
  const order = await topLevel();
  // blocks (from step 40), head (52), <loss> (55): failing, in onset order; then the rest forward.
  check(JSON.stringify(order) === JSON.stringify(["blocks", "head", "<loss>", "<input>", "embed", "ln_f", "<optimizer>"]),
    `anomalies first: ${order.join(", ")}`);
  ls = await labels();
  const inBlocks = ls.filter((l) => l.level === 2).map((l) => l.id);
  check(inBlocks[0] === "blocks.[30…39]" && inBlocks[1] === "blocks.[0…9]", `inside blocks: the root cause's range, then blocks.5's (60): ${inBlocks.slice(0, 3).join(", ")}`);
  const i37 = ls.findIndex((l) => l.id === "blocks.37");
  const i38 = ls.findIndex((l) => l.id === "blocks.38");
  const i30 = ls.findIndex((l) => l.id === "blocks.30");
  check(i37 >= 0 && i37 < i38 && i38 < i30, "blocks.37 (40) before blocks.38 (47) before the healthy blocks.30");
  check((await parentHash()).includes("p.neuraldbg.order=onset"), "the URL keeps the order");
  await page.screenshot({ path: path.join(shots, "tree_anomalies.png") });
  await page.reload();
  await tab();
  check(JSON.stringify(await topLevel()) === JSON.stringify(order) &&
    (await frame.$eval(".nd-order button[data-order=onset]", (b) => b.getAttribute("aria-pressed"))) === "true", "a reload restores the order from the URL");
  await frame.click(".nd-order button[data-order=forward]");
  await rowsUntil((ls) => ls[0].id === "<input>");
  check(!(await parentHash()).includes("p.neuraldbg.order"), "forward order again, gone from the URL");

  // ---- the run list: status and root cause of each run in one line ----
  const sums = await frame.$$eval(".nd-runitem", (els) => Object.fromEntries(els.map((e) => [e.getAttribute("data-run"), e.querySelector("[data-testid=run-summary]")])
    .map(([run, s]) => [run, { text: s.textContent, title: s.getAttribute("title"), fits: s.scrollWidth <= s.clientWidth,
      lines: Math.round(s.getBoundingClientRect().height / parseFloat(getComputedStyle(s).lineHeight)) }])));
  check(sums[RUN].title === `Exploding gradient in ${ROOT} from step 40` && sums[RUN].text.includes("@ 40") && sums[RUN].lines === 1 && sums[RUN].fits,
    `run list: ${RUN}: "${sums[RUN].text}"`);
  check(sums[HEALTHY].text === "healthy · 100 steps" && sums[HEALTHY].lines === 1, `run list: ${HEALTHY}: "${sums[HEALTHY].text}"`);

  // ---- switching runs keeps the expansion (one model, one tree) ----
  await frame.evaluate((run) => [...document.querySelectorAll(".nd-runitem")].find((e) => e.getAttribute("data-run") === run).querySelector(".nd-runname").click(), HEALTHY);
  await frame.waitForFunction((run) => document.querySelector(".nd-panel")?.getAttribute("data-run") === run, HEALTHY, { timeout: TIMEOUT });
  await tab();
  check(await kept(), "switching to the healthy run keeps the groups the user opened");
  await frame.evaluate((run) => [...document.querySelectorAll(".nd-runitem")].find((e) => e.getAttribute("data-run") === run).querySelector(".nd-runname").click(), RUN);
  await frame.waitForFunction((run) => document.querySelector(".nd-panel")?.getAttribute("data-run") === run, RUN, { timeout: TIMEOUT });
  await tab();

  // ---- the screenshot of the README: the tree as it opens, the root cause's layer open ----
  await page.evaluate(() => localStorage.clear());
  await page.reload();
  await tab();
  await frame.click(".nd-rootcause button");
  await frame.waitForSelector(`[data-testid=layer-detail][data-state=ready][data-layer="${ROOT}"]`, { timeout: TIMEOUT });
  await frame.click(".nd-toolbar button[aria-label='Show all steps']");
  await page.waitForTimeout(800);
  await page.mouse.move(0, 0);
  await frame.evaluate(() => window.scrollTo(0, 0));
  await page.waitForTimeout(300);
  check((await labels()).some((l) => l.id === ROOT && l.root), "jump there shows the root cause's row");
  const readme = path.join(shots, "readme_tree.png");
  await page.screenshot({ path: readme });
  if (env.ND_DOCS_SHOT) copyFileSync(readme, env.ND_DOCS_SHOT);
  check(pageErrors.length === 0, "no uncaught errors in the page", pageErrors.join("\n  "));
} catch (e) {
  console.log(String(e.stack ?? e));
  exitCode = 1;
} finally {
  await browser.close();
}
process.exit(exitCode);
