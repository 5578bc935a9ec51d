/**
 * The row filter: which rows a typed text keeps (pure).
 *
 * A row is kept when the text occurs in its name or in its module type
 * (`meta.layers[].type`), ignoring case: `fc1`, `attn`, `blocks.13.`,
 * `LayerNorm`. Words separated by spaces must all match (`blocks.3 norm`);
 * a comma separates alternatives (`fc1, fc2`).
 */
import type { LayerInfo } from "./types";

/** Alternatives of words, lowercased; [] for a blank text (no filter). */
export function parseFilter(text: string): string[][] {
  return text
    .split(",")
    .map((alt) => alt.trim().toLowerCase().split(/\s+/).filter((w) => w !== ""))
    .filter((words) => words.length > 0);
}

/** Whether one row matches a parsed filter. */
export function rowMatches(name: string, type: string, filter: readonly (readonly string[])[]): boolean {
  if (filter.length === 0) return true;
  const n = name.toLowerCase();
  const t = type.toLowerCase();
  return filter.some((words) => words.every((w) => n.includes(w) || t.includes(w)));
}

/**
 * Per row of `names`: 1 when the filter keeps it. `types` gives a row's
 * module type by name (meta.layers). Null for a blank filter.
 */
export function keptRows(names: readonly string[], types: ReadonlyMap<string, string>, text: string): Uint8Array | null {
  const filter = parseFilter(text);
  if (filter.length === 0) return null;
  return Uint8Array.from(names, (name) => (rowMatches(name, types.get(name) ?? "", filter) ? 1 : 0));
}

/** Layer name -> module type, from a meta's layer list. */
export function typesOf(layers: readonly LayerInfo[]): Map<string, string> {
  return new Map(layers.map((l) => [l.name, l.type]));
}
