import { test } from "node:test";
import assert from "node:assert/strict";
import { cellAt, cellRect, colForStep, computeLayout, rowHeightFor, ROW_MAX, ROW_MIN } from "../src/layout";

test("row height fits the rows, within bounds", () => {
  assert.equal(rowHeightFor(5, 400), ROW_MAX);
  assert.equal(rowHeightFor(40, 400), 10);
  assert.equal(rowHeightFor(1000, 400), ROW_MIN);
});

test("edges are whole device pixels covering the canvas without gaps", () => {
  const l = computeLayout(301, 3, 7, 10, 2);
  assert.equal(l.xEdges[0], 0);
  assert.equal(l.xEdges[7], 602);
  assert.equal(l.yEdges[3], 60);
  for (let c = 0; c < 7; c++) assert.ok(l.xEdges[c + 1] > l.xEdges[c]);
});

test("hit testing round-trips with cellRect", () => {
  const l = computeLayout(500, 10, 37, 12, 1.5);
  for (const [row, col] of [[0, 0], [9, 36], [4, 17]]) {
    const r = cellRect(l, row, col);
    assert.deepEqual(cellAt(l, r.x + r.w / 2, r.y + r.h / 2), { row, col });
  }
  assert.equal(cellAt(l, -1, 5), null);
  assert.equal(cellAt(l, 10, 10 * 12), null);
});

test("colForStep finds the bin of a step or the nearest one", () => {
  const start = [0, 10, 20, 40];
  const end = [9, 19, 29, 49];
  assert.equal(colForStep(start, end, 0), 0);
  assert.equal(colForStep(start, end, 15), 1);
  assert.equal(colForStep(start, end, 29), 2);
  assert.equal(colForStep(start, end, 31), 2);
  assert.equal(colForStep(start, end, 38), 3);
  assert.equal(colForStep(start, end, 99), 3);
  assert.equal(colForStep(start, end, -5), 0);
  assert.equal(colForStep([], [], 3), -1);
});
