import { test } from "node:test";
import assert from "node:assert/strict";
import { chartScale, segments, xPixel, yPixel } from "../src/linechart";

const box = { left: 10, top: 0, width: 100, height: 50 };

test("log chart maps decades linearly and breaks at gaps", () => {
  const steps = [0, 1, 2, 3, 4];
  const values = [1e-3, 1e-2, NaN, 1e-1, 0];
  const s = chartScale(steps, values, true);
  assert.equal(s.y0, -3);
  assert.equal(s.y1, -1);
  assert.equal(yPixel(s, box, 1e-3), 50);
  assert.equal(yPixel(s, box, 1e-1), 0);
  assert.equal(xPixel(s, box, 2), 60);
  const segs = segments(steps, values, s, box);
  assert.equal(segs.length, 2); // NaN breaks; 0 has no log and breaks too
  assert.deepEqual(segs[0], [10, 50, 35, 25]);
  assert.deepEqual(segs[1], [85, 0]);
});

test("flat and empty series still get a non-degenerate scale", () => {
  const s = chartScale([5], [2], false);
  assert.ok(s.y1 > s.y0 && s.x1 > s.x0);
  const e = chartScale([], [], true);
  assert.ok(e.y1 > e.y0);
  assert.ok(Number.isNaN(yPixel(s, box, Infinity)));
});
