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
  console.log(`ok - ${what}`);
}

/** Headless chromium ($CHROMIUM, else /usr/bin/chromium) without network chatter. */
export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
  });
}
