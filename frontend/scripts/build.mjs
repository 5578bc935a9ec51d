// Bundle src/index.ts into ONE ES module at tb_neuraldbg/static/index.js
// (served by the plugin as index.js; TensorBoard imports it and calls render()).
import { build } from "esbuild";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..");
const outfile = path.resolve(root, "..", "tb_neuraldbg", "static", "index.js");

const result = await build({
  entryPoints: [path.join(root, "src", "index.ts")],
  outfile,
  bundle: true,
  format: "esm",
  target: "es2020",
  minify: true,
  sourcemap: false,
  legalComments: "none",
  metafile: true,
  logLevel: "warning",
});
const bytes = Object.values(result.metafile.outputs)[0].bytes;
console.log(`wrote ${path.relative(process.cwd(), outfile)} (${(bytes / 1024).toFixed(1)} KiB)`);
