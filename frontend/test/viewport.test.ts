import { test } from "node:test";
import assert from "node:assert/strict";
import { clampRange, isFull, MIN_SPAN, panRange, unionRange, windowAround, zoomRange } from "../src/viewport";

const B = { start: 0, end: 1000 };

test("zoom keeps the anchor in place and respects bounds", () => {
  const r = zoomRange(B, 0.5, 250, B);
  assert.deepEqual(r, { start: 125, end: 625 });
  const out = zoomRange(r, 4, 250, B);
  assert.deepEqual(out, B);
  const tiny = zoomRange({ start: 100, end: 110 }, 0.01, 105, B);
  assert.equal(tiny.end - tiny.start, MIN_SPAN);
});

test("pan clamps at the ends and keeps the span", () => {
  assert.deepEqual(panRange({ start: 100, end: 200 }, 50, B), { start: 150, end: 250 });
  assert.deepEqual(panRange({ start: 100, end: 200 }, -500, B), { start: 0, end: 100 });
  assert.deepEqual(panRange({ start: 100, end: 200 }, 5000, B), { start: 900, end: 1000 });
});

test("window around a step, full and union", () => {
  assert.deepEqual(windowAround(500, 100, B), { start: 450, end: 550 });
  assert.deepEqual(windowAround(5, 100, B), { start: 0, end: 100 });
  assert.ok(isFull(clampRange({ start: -10, end: 2000 }, B), B));
  assert.ok(!isFull({ start: 1, end: 1000 }, B));
  assert.deepEqual(unionRange([{ start: 5, end: 10 }, { start: 0, end: 7 }]), { start: 0, end: 10 });
  assert.equal(unionRange([]), null);
  // a run shorter than MIN_SPAN
  assert.deepEqual(zoomRange({ start: 0, end: 3 }, 0.5, 1, { start: 0, end: 3 }), { start: 0, end: 3 });
});
