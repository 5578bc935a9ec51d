/**
 * The heatmap's rows as a module tree: `blocks.13.fc1` under `blocks.13`
 * under `blocks`, built from the qualified names of the rows (pure, no DOM).
 *
 * - A node is a row of data (a layer), a group (a path prefix no row has),
 *   or both (a module with parameters of its own and children, e.g.
 *   nn.MultiheadAttention above its out_proj).
 * - Pseudo-layers and placeholders (`<input>`, `<loss>`, `<optimizer>`,
 *   `<row 7>`) are never split: they stay top-level rows.
 * - A group with a single child is not a level of its own: `encoder` holding
 *   only `layers` becomes one node `encoder.layers`, and a group holding one
 *   row is that row (labelled with the joined path).
 * - More than MAX_SIBLINGS children (a Sequential of 500 blocks) are split
 *   into ranges of 10, 100, ... consecutive children, so no level is a wall.
 * - Siblings are in forward order: the order of the first row they hold.
 *
 * `visibleRows` flattens the tree for given expansion, filter and order;
 * `defaultExpansion` is what a run opens with.
 */
import type { LayerInfo } from "./types";

/** More children than this are split into ranges. */
export const MAX_SIBLINGS = 40;
/** A run opens with at most about this many rows (the root cause's branch may need more). */
export const OPEN_ROWS = 40;

export interface TreeNode {
  /** The node's identity: the layer's name, a group's path, or a range's `parent.[a…b]`. */
  id: string;
  /** The text shown, relative to the parent. */
  label: string;
  /** Row of the node's own data in the layer list, -1 for a group. */
  layer: number;
  parent: number;
  children: number[];
  depth: number;
  /** Every row of the subtree (the node's own included), ascending. */
  rows: Int32Array;
  /** The lowest of `rows`: the node's place in forward order. */
  first: number;
  /** A range of siblings (not a module). */
  range: boolean;
}

export interface ModuleTree {
  nodes: TreeNode[];
  roots: number[];
  /** Node of each row of the layer list. */
  nodeOfLayer: Int32Array;
  /** Node index by id. */
  byId: Map<string, number>;
}

const ATOMIC = /^<[^<>]*>$/;

/** The path segments of a row's name; a pseudo-layer or an odd name is one segment. */
export function segmentsOf(name: string): string[] {
  if (ATOMIC.test(name)) return [name];
  const parts = name.split(".");
  return parts.some((p) => p === "") ? [name] : parts;
}

interface Trie {
  seg: string;
  layer: number;
  first: number;
  kids: Map<string, Trie>;
  /** Rows that repeat a name already taken: kept as rows of their own. */
  twins: number[];
}

function trieNode(seg: string, first: number): Trie {
  return { seg, layer: -1, first, kids: new Map(), twins: [] };
}

/** Build the tree of `layers` (the heatmap's row names, in row order). */
export function buildTree(layers: readonly (string | LayerInfo)[]): ModuleTree {
  const names = layers.map((l) => (typeof l === "string" ? l : l.name));
  const top = trieNode("", 0);
  names.forEach((name, row) => {
    let t = top;
    for (const seg of segmentsOf(name)) {
      let k = t.kids.get(seg);
      if (!k) t.kids.set(seg, (k = trieNode(seg, row)));
      t = k;
    }
    if (t.layer < 0) t.layer = row;
    else t.twins.push(row);
  });

  const nodes: TreeNode[] = [];
  const add = (id: string, label: string, layer: number, first: number, range = false): number => {
    nodes.push({ id, label, layer, parent: -1, children: [], depth: 0, rows: new Int32Array(0), first, range });
    return nodes.length - 1;
  };
  const byFirst = (a: number, b: number) => nodes[a].first - nodes[b].first;

  /** Nodes standing for trie `t` (reached by `path`), labelled `prefix` + its segment. */
  const convert = (t: Trie, path: string, prefix: string): number[] => {
    const label = prefix + t.seg;
    const kids = [...t.kids.values()];
    if (t.layer < 0 && kids.length === 1) {
      const only = kids[0];
      return convert(only, `${path}.${only.seg}`, `${label}.`);
    }
    const n = add(path, label, t.layer, t.first);
    nodes[n].children = chunk(kids.flatMap((k) => convert(k, `${path}.${k.seg}`, "")).sort(byFirst), path);
    return [n, ...t.twins.map((row) => add(path, label, row, row))];
  };

  /** Ranges of consecutive children when there are too many (pseudo-layers stay out). */
  const chunk = (children: number[], parentId: string): number[] => {
    const plain = children.filter((c) => !ATOMIC.test(nodes[c].id));
    if (plain.length <= MAX_SIBLINGS) return children;
    const size = 10 ** Math.ceil(Math.log10(plain.length / MAX_SIBLINGS));
    const out = children.filter((c) => ATOMIC.test(nodes[c].id));
    for (let i = 0; i < plain.length; i += size) {
      const part = plain.slice(i, i + size);
      if (part.length === 1) {
        out.push(part[0]);
        continue;
      }
      const a = nodes[part[0]].label;
      const b = nodes[part[part.length - 1]].label;
      const r = add(`${parentId ? `${parentId}.` : ""}[${a}…${b}]`, `${a} … ${b}`, -1, nodes[part[0]].first, true);
      nodes[r].children = part;
      out.push(r);
    }
    return out.sort(byFirst);
  };

  const roots = chunk([...top.kids.values()].flatMap((k) => convert(k, k.seg, "")).sort(byFirst), "");

  // Parents, depths and the rows of each subtree (children before parents).
  const order: number[] = [];
  const visit = (n: number, parent: number, depth: number) => {
    const node = nodes[n];
    node.parent = parent;
    node.depth = depth;
    for (const c of node.children) visit(c, n, depth + 1);
    order.push(n);
  };
  for (const r of roots) visit(r, -1, 0);
  for (const n of order) {
    const node = nodes[n];
    const rows: number[] = node.layer >= 0 ? [node.layer] : [];
    for (const c of node.children) for (const r of nodes[c].rows) rows.push(r);
    node.rows = Int32Array.from(rows).sort();
    node.first = node.rows.length ? node.rows[0] : node.first;
  }
  const nodeOfLayer = new Int32Array(names.length).fill(-1);
  const byId = new Map<string, number>();
  nodes.forEach((node, i) => {
    if (node.layer >= 0) nodeOfLayer[node.layer] = i;
    if (!byId.has(node.id)) byId.set(node.id, i);
  });
  return { nodes, roots, nodeOfLayer, byId };
}

/** Ancestors of node `n`, nearest first. */
export function ancestors(tree: ModuleTree, n: number): number[] {
  const out: number[] = [];
  for (let p = tree.nodes[n].parent; p >= 0; p = tree.nodes[p].parent) out.push(p);
  return out;
}

/** Ids of every node with children (what "expand all" opens). */
export function groupIds(tree: ModuleTree): string[] {
  return tree.nodes.filter((n) => n.children.length > 0).map((n) => n.id);
}

/**
 * What a run opens with, so that a big model opens as a few dozen rows that
 * show where it failed and a small one opens whole:
 * 1. the branches holding `focus` (the root cause's layer; those of several
 *    runs compared) are expanded, whatever they cost;
 * 2. then the branches of `also` (other failing layers, in onset order),
 *    each while the rows shown stay within `budget`;
 * 3. then level by level from the top, every collapsed group of a level
 *    when all of them fit together (never some groups of a level and not
 *    their siblings).
 */
export function defaultExpansion(tree: ModuleTree, focus: readonly string[], also: readonly string[] = [], budget = OPEN_ROWS): Set<string> {
  const { nodes } = tree;
  const open = new Set<number>();
  const isVisible = (n: number) => ancestors(tree, n).every((a) => open.has(a));
  let count = tree.roots.length;
  const expand = (n: number) => {
    open.add(n);
    count += nodes[n].children.length;
  };
  /** Expand what hides `n` (outermost first); false when it would pass the budget (nothing changes). */
  const reveal = (n: number, limit: number): boolean => {
    const closed = ancestors(tree, n).filter((a) => !open.has(a)).reverse();
    const cost = closed.reduce((k, a) => k + nodes[a].children.length, 0);
    if (count + cost > limit) return false;
    closed.forEach(expand);
    return true;
  };
  for (const name of focus) {
    const n = tree.byId.get(name);
    if (n !== undefined) reveal(n, Infinity);
  }
  for (const name of also) {
    const n = tree.byId.get(name);
    if (n !== undefined) reveal(n, budget);
  }
  for (let level = tree.roots.filter((n) => nodes[n].children.length > 0); level.length > 0; ) {
    const closed = level.filter((n) => !open.has(n));
    const cost = closed.reduce((k, n) => k + nodes[n].children.length, 0);
    if (closed.length > 0 && count + cost > budget) break;
    closed.forEach(expand);
    level = level.flatMap((n) => nodes[n].children).filter((c) => nodes[c].children.length > 0 && isVisible(c));
  }
  return new Set([...open].map((n) => nodes[n].id));
}

/**
 * How a visible row shows its node: Leaf, a row of data without children
 * shown; Group, a collapsed group (the worst of the rows it holds); Open, an
 * expanded group (its own row of data if it has one, else an empty band).
 */
export const RowKind = { Leaf: 0, Group: 1, Open: 2 } as const;
export type RowKind = (typeof RowKind)[keyof typeof RowKind];

export interface VisibleRow {
  node: number;
  kind: RowKind;
  /** The rows of data the row shows: one for a leaf or an open layer, the kept rows of a group, none for a band. */
  rows: Int32Array;
  /** Shown only as an ancestor of rows the filter keeps. */
  context: boolean;
}

export interface RowOptions {
  /** Whether a node with children is expanded. */
  expanded(node: TreeNode): boolean;
  /** Per row of the layer list: 1 = kept by the filter; null = no filter. */
  keep?: Uint8Array | null;
  /** Per row: sort key of the anomalies-first order (lower first, Infinity = never failed); null = forward order. */
  order?: Float64Array | null;
}

/** The rows shown, top to bottom. */
export function visibleRows(tree: ModuleTree, opts: RowOptions): VisibleRow[] {
  const { nodes } = tree;
  const keep = opts.keep ?? null;
  // Per node: the kept rows of its subtree (all of them without a filter).
  const kept = (n: number): Int32Array => (keep ? nodes[n].rows.filter((r) => keep[r] === 1) : nodes[n].rows);
  const keys = opts.order ? new Float64Array(nodes.length) : null;
  const keyOf = (rows: Int32Array, order: Float64Array): number => {
    let k = Infinity;
    for (const r of rows) if (order[r] < k) k = order[r];
    return k;
  };
  const out: VisibleRow[] = [];
  const walk = (list: readonly number[]) => {
    let shown = list.map((n) => ({ n, rows: kept(n) })).filter((x) => x.rows.length > 0);
    if (keys && opts.order) {
      for (const x of shown) keys[x.n] = keyOf(x.rows, opts.order);
      // Stable: equal keys (the healthy rows) keep forward order.
      shown = shown.map((x, i) => ({ ...x, i })).sort((a, b) => keys[a.n] - keys[b.n] || a.i - b.i);
    }
    for (const { n, rows } of shown) {
      const node = nodes[n];
      const own = node.layer >= 0 && (!keep || keep[node.layer] === 1);
      const hasKids = node.children.some((c) => kept(c).length > 0);
      const context = !!keep && !own;
      if (!hasKids) {
        out.push({ node: n, kind: RowKind.Leaf, rows, context });
      } else if (opts.expanded(node)) {
        out.push({ node: n, kind: RowKind.Open, rows: own ? Int32Array.of(node.layer) : new Int32Array(0), context });
        walk(node.children);
      } else {
        out.push({ node: n, kind: RowKind.Group, rows, context: false });
      }
    }
  };
  walk(tree.roots);
  return out;
}
