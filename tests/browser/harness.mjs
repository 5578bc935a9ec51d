// What a browser check script needs first: playwright-core from frontend/,
// a headless chromium, and `check` (one line per check, throws on failure).
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", "..", "frontend", "package.json"));
const { chromium } = require("playwright-core");

/** How long a wait for the tab may take (a cold tensorboard, a big logdir). */
export const TIMEOUT = 60000;

/** Print "ok - what", or throw with what failed and why. */
export function check(cond, what, detail = "") {
  if (!cond) throw new Error(`FAILED: ${what}${detail ? `\n  ${detail}` : ""}`);
  checks++;
  console.log(`ok - ${what}`);
}

/** Headless chromium ($CHROMIUM, else /usr/bin/chromium) without network chatter. */
export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
  });
}

let checks = 0;

/** Run ``body(browser)`` with a headless chromium, then exit: 0 when every
 * check held, 1 on the first failure (printed with its stack); the browser
 * is closed either way and the number of checks that held is printed. */
export async function withBrowser(body) {
  const browser = await launchChromium();
  let exitCode = 0;
  try {
    await body(browser);
  } catch (e) {
    console.log(String(e.stack ?? e));
    exitCode = 1;
  } finally {
    await browser.close();
    console.log(`${checks} checks`);
  }
  process.exit(exitCode);
}
