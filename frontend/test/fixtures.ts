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

const BLOCK = [
  ["ln1", "LayerNorm"], ["attn.q_proj", "Linear"], ["attn.k_proj", "Linear"], ["attn.v_proj", "Linear"], ["attn.out_proj", "Linear"],
  ["ln2", "LayerNorm"], ["mlp.fc1", "Linear"], ["mlp.act", "GELU"], ["mlp.fc2", "Linear"], ["mlp.drop", "Dropout"],
] as const;

/**
 * `rows` rows of a transformer in forward order: <input>, embed, blocks.N.*
 * (10 modules a block, the last block cut to fit), ln_f, head, <loss>, <optimizer>.
 */
export function transformerLayers(rows: number): { name: string; type: string }[] {
  const head = [{ name: "<input>", type: "input" }, { name: "embed", type: "Embedding" }];
  const tail = [{ name: "ln_f", type: "LayerNorm" }, { name: "head", type: "Linear" }, { name: "<loss>", type: "loss" }, { name: "<optimizer>", type: "optimizer" }];
  const body: { name: string; type: string }[] = [];
  for (let i = 0; body.length < rows - head.length - tail.length; i++) {
    const [m, type] = BLOCK[i % BLOCK.length];
    body.push({ name: `blocks.${Math.floor(i / BLOCK.length)}.${m}`, type });
  }
  return [...head, ...body, ...tail];
}
