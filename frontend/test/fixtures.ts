/** Shared test data: a worst-case heatmap for the draw budget (unit test and browser bench). */
import { buildPalette } from "../src/colormap";
import { StateTable } from "../src/states";
import { BUILTIN_TABLES } from "../src/tables";

/** A deterministic pseudo-random generator in [0, 1). */
export function lcg(seed: number): () => number {
  let s = seed;
  return () => (s = (s * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
}

/**
 * rows x cols values spread over 6 decades (neighbours rarely share a colour:
 * the worst case for painting) with 2% of cells in a random failing state.
 */
export function worstCaseMatrix(rows: number, cols: number, seed = 1): { values: Float32Array; states: Uint8Array } {
  const n = rows * cols;
  const values = new Float32Array(n);
  const states = new Uint8Array(n);
  const rand = lcg(seed);
  for (let i = 0; i < n; i++) {
    values[i] = 10 ** (-6 + 6 * rand());
    states[i] = rand() < 0.02 ? 1 + Math.floor(rand() * 14) : 0;
  }
  return { values, states };
}

/** A palette for 15 state codes named s0..s14: healthy, then 14 failing ones in the "unknown state" colour. */
export function testPalette(): string[] {
  const colors = BUILTIN_TABLES.states.colors;
  const rows = Array.from({ length: 15 }, (_, code) => ({
    code, name: `s${code}`, severity: "error" as const, rank: code, kind: null, evidence: null, label: `s${code}`,
    color: code === 0 ? BUILTIN_TABLES.states.healthyColor() : colors.unknown_state,
  }));
  return buildPalette(new StateTable(rows, colors));
}
