/**
 * Canvas painting of a heatmap from colour indices, two ways:
 *
 * - By colour bucket (after uPlot's heatmap demo) when cells are big enough
 *   to be worth a rect: cells are grouped by colour index, one path and ONE
 *   fill() per colour; runs of equal colour along a row merge into one rect.
 * - By pixel when the grid is dense (cells of a few device pixels, e.g. 1,000
 *   rows x 2,000 columns): every cell is then its own rect and a path of
 *   millions of rects costs ~900 ms in Chromium, while writing the same
 *   colours straight into an ImageData costs a few ms (measured by
 *   tests/browser). Edges are whole device pixels, so both give the same image.
 */
import type { Layout } from "./layout";
import { NO_DATA, packPalette } from "./colormap";
import { skippedRuns, type CellNotes } from "./cells";

/** The part of CanvasRenderingContext2D the painter uses (tests pass a fake). */
export interface PaintContext {
  fillStyle: string | CanvasGradient | CanvasPattern;
  setTransform(a: number, b: number, c: number, d: number, e: number, f: number): void;
  clearRect(x: number, y: number, w: number, h: number): void;
  beginPath(): void;
  rect(x: number, y: number, w: number, h: number): void;
  fill(): void;
  createImageData(w: number, h: number): ImageData;
  putImageData(data: ImageData, x: number, y: number, dirtyX: number, dirtyY: number, dirtyW: number, dirtyH: number): void;
}

/** Below this average cell area (device px^2) the pixel painter is used. */
export const DENSE_CELL_AREA = 24;

export interface Buckets {
  /** Number of rects per colour index. */
  counts: Uint32Array;
  /** Start of each colour's rects in `rects` (in rects, not floats). */
  offsets: Uint32Array;
  /** x, y, w, h per rect, device px, grouped by colour. */
  rects: Float32Array;
}

/** Group cells into per-colour rects (row runs merged); NO_DATA cells are skipped. */
export function bucketRects(layout: Layout, idx: Uint8Array): Buckets {
  const { rows, cols, xEdges, yEdges } = layout;
  const counts = new Uint32Array(256);
  // Pass 1: count runs per colour to size one flat array (no per-colour growth).
  for (let r = 0; r < rows; r++) {
    const base = r * cols;
    let c = 0;
    while (c < cols) {
      const v = idx[base + c];
      let e = c + 1;
      while (e < cols && idx[base + e] === v) e++;
      counts[v]++;
      c = e;
    }
  }
  counts[NO_DATA] = 0;
  const offsets = new Uint32Array(256);
  let total = 0;
  for (let i = 0; i < 256; i++) {
    offsets[i] = total;
    total += counts[i];
  }
  const rects = new Float32Array(total * 4);
  const fillAt = offsets.slice();
  // Pass 2: write the rects.
  for (let r = 0; r < rows; r++) {
    const base = r * cols;
    const y = yEdges[r];
    const h = yEdges[r + 1] - y;
    let c = 0;
    while (c < cols) {
      const v = idx[base + c];
      let e = c + 1;
      while (e < cols && idx[base + e] === v) e++;
      if (v !== NO_DATA) {
        const k = fillAt[v]++ * 4;
        rects[k] = xEdges[c];
        rects[k + 1] = y;
        rects[k + 2] = xEdges[e] - xEdges[c];
        rects[k + 3] = h;
      }
      c = e;
    }
  }
  return { counts, offsets, rects };
}

/**
 * Paint the matrix into a canvas sized layout.xEdges[cols] x layout.yEdges[rows]
 * device px. Returns the number of fill() calls (0 for the pixel painter).
 */
export function paintHeatmap(ctx: PaintContext, layout: Layout, idx: Uint8Array, palette: readonly string[]): number {
  const w = layout.xEdges[layout.cols];
  const h = layout.yEdges[layout.rows];
  ctx.setTransform(1, 0, 0, 1, 0, 0);
  if (w * h < DENSE_CELL_AREA * layout.rows * layout.cols) {
    paintPixels(ctx, layout, idx, packPalette(palette));
    return 0;
  }
  ctx.clearRect(0, 0, w, h);
  const { counts, offsets, rects } = bucketRects(layout, idx);
  let fills = 0;
  for (let v = 0; v < 256; v++) {
    const n = counts[v];
    if (n === 0) continue;
    ctx.fillStyle = palette[v];
    ctx.beginPath();
    for (let i = offsets[v] * 4, end = (offsets[v] + n) * 4; i < end; i += 4) {
      ctx.rect(rects[i], rects[i + 1], rects[i + 2], rects[i + 3]);
    }
    ctx.fill();
    fills++;
  }
  return fills;
}

// One ImageData per context, reused while the width stays and the height
// fits (8 MB at 2000x1000: allocating and zeroing it again on every repaint,
// or on every group expanded or collapsed, is a measurable cost).
const images = new WeakMap<object, ImageData>();

/** Write cell colours straight into an ImageData: one scanline per row, copied down the row. */
export function paintPixels(ctx: PaintContext, layout: Layout, idx: Uint8Array, palette32: Uint32Array): void {
  const { rows, cols, xEdges, yEdges } = layout;
  const w = xEdges[cols];
  const h = yEdges[rows];
  if (w === 0 || h === 0) return;
  let img = images.get(ctx);
  if (!img || img.width !== w || img.height < h) {
    // Room to grow: expanding groups one after another must not reallocate each time.
    img = ctx.createImageData(w, img && img.width === w ? Math.ceil(h * 1.25) : h);
    images.set(ctx, img);
  }
  const px = new Uint32Array(img.data.buffer, img.data.byteOffset, w * h);
  const onePx = w === cols; // every cell exactly one device pixel wide
  for (let r = 0; r < rows; r++) {
    const y0 = yEdges[r];
    const y1 = yEdges[r + 1];
    if (y1 <= y0) continue;
    const line = y0 * w;
    const base = r * cols;
    if (onePx) {
      for (let c = 0; c < cols; c++) px[line + c] = palette32[idx[base + c]];
    } else {
      for (let c = 0; c < cols; c++) {
        // A plain loop: TypedArray.fill's call overhead dominates 1-3 px cells.
        const color = palette32[idx[base + c]];
        for (let x = line + xEdges[c], end = line + xEdges[c + 1]; x < end; x++) px[x] = color;
      }
    }
    for (let y = y0 + 1; y < y1; y++) px.copyWithin(y * w, line, line + w);
  }
  ctx.putImageData(img, 0, 0, 0, 0, w, h);
}

/**
 * Over the painted cells, what a blank means (cells.ts): columns with steps a
 * GradScaler skipped hatched across every row, and on each row that has
 * none of the metric the reason, in grey, at its start. `rows` maps each
 * shown row to its matrix row (-1: a group or a band).
 */
export function paintNotes(ctx: CanvasRenderingContext2D, layout: Layout, notes: CellNotes | undefined, rows: Int32Array): void {
  if (!notes) return;
  const { xEdges, yEdges, dpr } = layout;
  const h = yEdges[layout.rows];
  ctx.setTransform(1, 0, 0, 1, 0, 0);
  const runs = skippedRuns(notes.skipped);
  if (runs.length) {
    ctx.fillStyle = hatch(ctx, dpr);
    ctx.beginPath();
    for (const [a, b] of runs) ctx.rect(xEdges[a], 0, Math.max(xEdges[b] - xEdges[a], 1), h);
    ctx.fill();
  }
  const empty = notes.empty;
  const rowPx = layout.rowHeightCss * dpr;
  if (!empty || rowPx < 9 * dpr) return;
  ctx.font = `${Math.round(Math.min(11, layout.rowHeightCss - 4) * dpr)}px system-ui, sans-serif`;
  ctx.fillStyle = "#6b7280";
  ctx.textBaseline = "middle";
  for (let r = 0; r < layout.rows; r++) {
    const why = rows[r] >= 0 ? empty[rows[r]] : null;
    if (why) ctx.fillText(why, 6 * dpr, (yEdges[r] + yEdges[r + 1]) / 2);
  }
}

const hatches = new WeakMap<object, CanvasPattern | string>();

/** Grey diagonal stripes on a translucent wash: a skipped step, not a value. */
function hatch(ctx: CanvasRenderingContext2D, dpr: number): CanvasPattern | string {
  const known = hatches.get(ctx);
  if (known) return known;
  const size = Math.max(6, Math.round(6 * dpr));
  const tile = document.createElement("canvas");
  tile.width = tile.height = size;
  const t = tile.getContext("2d");
  let pattern: CanvasPattern | string = "rgba(107,114,128,.35)";
  if (t) {
    t.fillStyle = "rgba(255,255,255,.55)";
    t.fillRect(0, 0, size, size);
    t.strokeStyle = "rgba(75,85,99,.8)";
    t.lineWidth = Math.max(1, dpr);
    t.beginPath();
    t.moveTo(0, size);
    t.lineTo(size, 0);
    t.moveTo(-1, 1);
    t.lineTo(1, -1);
    t.moveTo(size - 1, size + 1);
    t.lineTo(size + 1, size - 1);
    t.stroke();
    pattern = ctx.createPattern(tile, "repeat") ?? pattern;
  }
  hatches.set(ctx, pattern);
  return pattern;
}
