import { test } from "node:test";
import assert from "node:assert/strict";
import { extremeScore, groupMatrix } from "../src/group";
import { BUILTIN_TABLES } from "../src/tables";

const ranks = BUILTIN_TABLES.states.ranks();
const code = (name: string) => BUILTIN_TABLES.states.states.find((s) => s.name === name)!.code;
const H = code("healthy");
const EXPL = code("exploding");
const NONF = code("nonfinite");
const VAN = code("vanishing");
const UNK = 255;

/** rows x cols from row-major arrays. */
function matrix(values: number[][], states: number[][]) {
  return { cols: values[0].length, values: Float32Array.from(values.flat()), states: Uint8Array.from(states.flat()) };
}

test("a group's cell holds the worst state of its rows, by rank not by code", () => {
  const m = matrix(
    [[1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]],
    [[H, VAN, H, UNK], [H, EXPL, NONF, UNK], [UNK, VAN, H, UNK]],
  );
  const g = groupMatrix(m, [Int32Array.of(0, 1, 2)], ranks, "log");
  assert.deepEqual([...g.states], [H, EXPL, NONF, UNK]);
  // Column 0 is healthy: the source is the extreme (3, farthest from 1); the others the first in the worst state.
  assert.deepEqual([...g.source.slice(0, 3)], [2, 1, 1]);
});

test("a failing cell shows the value of the first row in that state", () => {
  const m = matrix([[5e-3, 7e4], [9e5, 8e4], [1e-9, 6e4]], [[H, VAN], [EXPL, EXPL], [H, EXPL]]);
  const g = groupMatrix(m, [Int32Array.of(0, 1, 2)], ranks, "log");
  assert.deepEqual([...g.states], [EXPL, EXPL]);
  // Column 0: only row 1 explodes (1e-9 would be the extreme); column 1: rows 1 and 2 do, row 1 first.
  assert.deepEqual([...g.values], [Math.fround(9e5), Math.fround(8e4)]);
  assert.deepEqual([...g.source], [1, 1]);
});

test("healthy cells: the extreme by the metric's scale", () => {
  // log: farthest from 1 (0.001 is farther than 50); linear: the maximum.
  const m = matrix([[50], [1e-3], [2]], [[H], [H], [H]]);
  assert.deepEqual([...groupMatrix(m, [Int32Array.of(0, 1, 2)], ranks, "log").values], [Math.fround(1e-3)]);
  assert.deepEqual([...groupMatrix(m, [Int32Array.of(0, 1, 2)], ranks, "linear").values], [50]);
  // A negative value counts by its magnitude on a log scale.
  const neg = matrix([[-1e4], [30]], [[H], [H]]);
  assert.deepEqual([...groupMatrix(neg, [Int32Array.of(0, 1)], ranks, "log").values], [-1e4]);
});

test("infinities win, NaN loses, zero is farthest from 1 on a log scale, ties go to the first row", () => {
  const pick = (vals: number[], kind: "log" | "linear") =>
    groupMatrix(matrix(vals.map((v) => [v]), vals.map(() => [H])), [Int32Array.from(vals.keys())], ranks, kind).values[0];
  assert.equal(pick([NaN, 3, Infinity, 1e30], "log"), Infinity);
  assert.equal(pick([NaN, 3, -Infinity], "linear"), -Infinity);
  assert.equal(pick([NaN, 0.5, 0], "log"), 0);
  assert.equal(pick([1e-30, 0, 1e30], "log"), 0);
  assert.ok(Number.isNaN(pick([NaN, NaN], "log")));
  assert.equal(pick([NaN, 0.2], "linear"), Math.fround(0.2));
  assert.equal(pick([2, 0.5], "log"), 2);
  assert.equal(pick([0.5, 2], "log"), 0.5);
  assert.ok(extremeScore(Infinity, "log") > extremeScore(0, "log"));
  assert.ok(extremeScore(0, "log") > extremeScore(1.4e-45, "log"));
});

test("the state metric's value is the worst state's code; no data alone stays no data", () => {
  const m = matrix([[0, 0], [0, 0]], [[UNK, H], [UNK, VAN]]);
  const g = groupMatrix(m, [Int32Array.of(0, 1)], ranks, "state");
  assert.deepEqual([...g.states], [UNK, VAN]);
  assert.deepEqual([...g.values], [UNK, VAN]);
});

test("several groups; a group without rows stays empty", () => {
  const m = matrix([[1], [2], [3]], [[H], [EXPL], [H]]);
  const g = groupMatrix(m, [Int32Array.of(0), Int32Array.of(), Int32Array.of(1, 2)], ranks, "log");
  assert.equal(g.rows, 3);
  assert.deepEqual([...g.states], [H, UNK, EXPL]);
  assert.deepEqual([...g.source], [0, -1, 1]);
});
