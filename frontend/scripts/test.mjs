// Unit tests: bundle each test/*.test.ts with esbuild into a temp dir and run
// them with node's built-in test runner (no test framework dependency).
import { build } from "esbuild";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const testDir = path.join(root, "test");
const only = process.argv.slice(2);
const entries = readdirSync(testDir)
  .filter((f) => f.endsWith(".test.ts") && (only.length === 0 || only.some((o) => f.includes(o))))
  .map((f) => path.join(testDir, f));
const out = mkdtempSync(path.join(tmpdir(), "nd-frontend-test-"));
try {
  await build({
    entryPoints: entries,
    outdir: out,
    outExtension: { ".js": ".mjs" },
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    logLevel: "warning",
  });
  const files = readdirSync(out).filter((f) => f.endsWith(".mjs")).map((f) => path.join(out, f));
  const r = spawnSync(process.execPath, ["--test", ...files], { stdio: "inherit" });
  process.exitCode = r.status ?? 1;
} finally {
  rmSync(out, { recursive: true, force: true });
}
