import { test } from "node:test";
import assert from "node:assert/strict";
import { computeLayout } from "../src/layout";
import { bucketRects, paintHeatmap, type PaintContext } from "../src/paint";
import { colorIndices, computeScale, NO_DATA, RAMP_START, STATE_START } from "../src/colormap";
import { testPalette, worstCaseMatrix } from "./fixtures";

/** A fake 2D context: records fills and ImageData writes, rasterises both. */
class Recorder implements PaintContext {
  fillStyle: string | CanvasGradient | CanvasPattern = "";
  fills: { style: string; rects: number[][] }[] = [];
  image: ImageData | null = null;
  private path: number[][] = [];
  setTransform(): void {}
  clearRect(): void {}
  beginPath(): void {
    this.path = [];
  }
  rect(x: number, y: number, w: number, h: number): void {
    this.path.push([x, y, w, h]);
  }
  fill(): void {
    this.fills.push({ style: String(this.fillStyle), rects: this.path });
  }
  createImageData(w: number, h: number): ImageData {
    return { data: new Uint8ClampedArray(w * h * 4), width: w, height: h } as unknown as ImageData;
  }
  putImageData(img: ImageData): void {
    this.image = img;
  }
  /** Colour of every pixel as "#rrggbb" ("" = not painted). */
  raster(w: number, h: number): string[] {
    const px = new Array<string>(w * h).fill("");
    if (this.image) {
      const d = this.image.data;
      for (let i = 0; i < w * h; i++) {
        if (d[i * 4 + 3] === 0) continue;
        px[i] = "#" + [d[i * 4], d[i * 4 + 1], d[i * 4 + 2]].map((v) => v.toString(16).padStart(2, "0")).join("");
      }
      return px;
    }
    for (const f of this.fills) {
      for (const [x, y, rw, rh] of f.rects) {
        for (let j = y; j < y + rh; j++) for (let i = x; i < x + rw; i++) {
          assert.equal(px[j * w + i], "", `pixel ${i},${j} painted twice`);
          px[j * w + i] = f.style;
        }
      }
    }
    return px;
  }
}

const IDX = new Uint8Array([2, 2, 3, 3, 2, 0, 0, 5, 5, 5, 40, 2, 2, 2, 40]);
const PALETTE = Array.from({ length: 256 }, (_, i) => `#${(i * 0x010203).toString(16).padStart(6, "0")}`);

function expectImage(px: string[], layout: ReturnType<typeof computeLayout>, w: number): void {
  for (let r = 0; r < layout.rows; r++) {
    for (let c = 0; c < layout.cols; c++) {
      const v = IDX[r * layout.cols + c];
      const want = v === NO_DATA ? "" : PALETTE[v];
      for (let y = layout.yEdges[r]; y < layout.yEdges[r + 1]; y++) {
        for (let x = layout.xEdges[c]; x < layout.xEdges[c + 1]; x++) assert.equal(px[y * w + x], want, `cell ${r},${c} px ${x},${y}`);
      }
    }
  }
}

test("big cells: one fill per colour; every cell painted once with its colour", () => {
  const layout = computeLayout(100, 3, 5, 10, 1); // 20 x 10 px cells
  const ctx = new Recorder();
  const fills = paintHeatmap(ctx, layout, IDX, PALETTE);
  assert.equal(fills, 4); // colours 2, 3, 5, 40; no-data (0) is not painted
  assert.equal(ctx.image, null);
  assert.equal(new Set(ctx.fills.map((f) => f.style)).size, 4);
  expectImage(ctx.raster(100, 30), layout, 100);
});

test("dense cells: the pixel painter gives the same image", () => {
  const layout = computeLayout(12, 3, 5, 2, 1.5); // ~3.6 x 3 device px cells
  const ctx = new Recorder();
  assert.equal(paintHeatmap(ctx, layout, IDX, PALETTE), 0);
  assert.ok(ctx.image);
  const w = layout.xEdges[5];
  expectImage(ctx.raster(w, layout.yEdges[3]), layout, w);
});

test("equal neighbours in a row merge into one rect", () => {
  const layout = computeLayout(100, 2, 100, 1, 1);
  const idx = new Uint8Array(200).fill(7);
  idx[150] = 9;
  const b = bucketRects(layout, idx);
  assert.equal(b.counts[7], 3); // row 0: one run; row 1: two runs around the 9
  assert.equal(b.counts[9], 1);
});

test("1000 rows x 2000 columns: every failing cell keeps its state colour (timing: benchmarks/frontend_draw.mjs)", () => {
  // The draw time is a benchmark's job (benchmarks/frontend_draw.mjs), not a
  // unit test's: this checks the same worst-case matrix paints correctly.
  const rows = 1000;
  const cols = 2000;
  const { values, states } = worstCaseMatrix(rows, cols);
  const scale = computeScale("log", [{ values, states }]);
  const idx = colorIndices(scale, values, states);
  assert.equal(idx.length, rows * cols);
  let failing = 0;
  for (let i = 0; i < states.length; i++) {
    if (states[i] !== 0) {
      failing++;
      assert.equal(idx[i], STATE_START + states[i]);
    } else {
      assert.ok(idx[i] >= RAMP_START && idx[i] < STATE_START, `healthy cell ${i} -> ${idx[i]}`);
    }
  }
  assert.ok(failing > 0.01 * rows * cols);
  paintHeatmap(new Recorder(), computeLayout(2000, rows, cols, 1, 1), idx, testPalette());
});
