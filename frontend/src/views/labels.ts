/** Row-label text sizing: the label column's width and names cut to fit it. */
import type { ModuleTree } from "../tree";

const LABEL_FONT = "11px ui-monospace, SFMono-Regular, Menlo, monospace";
let measurer: CanvasRenderingContext2D | null = null;

export const LABEL_MAX = 200;
/** A tree's labels may take a little more: the indentation eats into them. */
export const TREE_LABEL_MAX = 240;
/** Indentation per tree level, and the room of the expand/collapse triangle (css px). */
export const INDENT = 10;
export const TWISTY = 12;

function measure(text: string): number {
  measurer ??= document.createElement("canvas").getContext("2d");
  if (!measurer) return text.length * 7;
  measurer.font = LABEL_FONT;
  return measurer.measureText(text).width;
}

/**
 * Width (css px) of the label column of a tree: its widest label at its
 * depth, whatever is expanded (so expanding never narrows the heatmap and
 * asks for a new one), within [48, LABEL_MAX] (TREE_LABEL_MAX with groups).
 */
export function treeLabelWidth(tree: ModuleTree): number {
  const groups = tree.nodes.some((n) => n.children.length > 0);
  const twisty = groups ? TWISTY : 0;
  let w = 0;
  for (const n of tree.nodes) w = Math.max(w, n.depth * INDENT + twisty + measure(n.label));
  // A tree's labels are left-aligned: room for the root cause's mark (12 px) too.
  return Math.round(Math.min(groups ? TREE_LABEL_MAX : LABEL_MAX, Math.max(48, w + (groups ? 34 : 22))));
}

/**
 * A name that fits `px`: cut at the START ("…layers.11.linear2"), since the
 * end of a module path says which module it is.
 */
export function fitLabel(name: string, px: number, width: (text: string) => number = measure): string {
  if (width(name) <= px) return name;
  let lo = 1;
  let hi = name.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (width(`…${name.slice(mid)}`) <= px) hi = mid;
    else lo = mid + 1;
  }
  return `…${name.slice(lo)}`;
}

