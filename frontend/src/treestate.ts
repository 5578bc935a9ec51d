/**
 * How the rows are shown, for every run alike (one model, one tree): which
 * groups are expanded, the filter text and the order. Pure state with a
 * version number that grows with every change (what views memoize on); the
 * app keeps it across reloads of the data and run switches and saves it
 * (urlstate.ts).
 *
 * Expansion: what the user toggled wins; else "expand all" / "collapse
 * all" if that was the last such choice; else the run's default (tree.ts
 * defaultExpansion: the root cause's branch, then what fits). While a filter
 * is on, the groups holding kept rows are expanded (the rows it keeps are
 * what the user asked to see); toggles made then last until the filter
 * changes.
 */

export type RowOrder = "forward" | "onset";
export type ExpandBase = "auto" | "all" | "none";

/** What is saved of the expansion (localStorage). */
export interface SavedExpansion {
  base: ExpandBase;
  /** Node id -> expanded, as the user toggled it. */
  toggled: Record<string, boolean>;
}

/** Toggles kept at most (the oldest go first): a saved state stays small. */
export const MAX_TOGGLES = 500;

export class TreeState {
  private base: ExpandBase = "auto";
  private readonly toggled = new Map<string, boolean>();
  private readonly filterToggled = new Map<string, boolean>();
  private filterText = "";
  private rowOrder: RowOrder = "forward";
  /** Grows with every change. */
  version = 0;

  constructor(saved?: SavedExpansion | null) {
    if (!saved) return;
    this.base = saved.base;
    for (const [id, open] of Object.entries(saved.toggled)) this.toggled.set(id, open);
  }

  get filter(): string {
    return this.filterText;
  }

  get order(): RowOrder {
    return this.rowOrder;
  }

  /** Whether a node with children is expanded; `auto` is the run's default set. */
  isOpen(id: string, auto: ReadonlySet<string>): boolean {
    if (this.filterText.trim() !== "") return this.filterToggled.get(id) ?? true;
    const t = this.toggled.get(id);
    if (t !== undefined) return t;
    return this.base === "all" ? true : this.base === "none" ? false : auto.has(id);
  }

  /** The user expanded (true) or collapsed (false) a node. */
  toggle(id: string, open: boolean): void {
    const map = this.filterText.trim() !== "" ? this.filterToggled : this.toggled;
    map.delete(id); // re-inserted last: the newest toggles are the ones kept
    map.set(id, open);
    while (map.size > MAX_TOGGLES) map.delete(map.keys().next().value as string);
    this.version++;
  }

  /** Expand the nodes of `ids` (the branch of a row to show), as toggles. */
  reveal(ids: readonly string[], auto: ReadonlySet<string>): void {
    const closed = ids.filter((id) => !this.isOpen(id, auto));
    for (const id of closed) this.toggle(id, true);
  }

  /** "Expand all" (true) or "collapse all" (false): forgets the toggles. */
  setAll(open: boolean): void {
    this.base = open ? "all" : "none";
    this.toggled.clear();
    this.filterToggled.clear();
    this.version++;
  }

  setFilter(text: string): void {
    if (text === this.filterText) return;
    this.filterText = text;
    this.filterToggled.clear();
    this.version++;
  }

  setOrder(order: RowOrder): void {
    if (order === this.rowOrder) return;
    this.rowOrder = order;
    this.version++;
  }

  saved(): SavedExpansion {
    return { base: this.base, toggled: Object.fromEntries(this.toggled) };
  }
}

/** A saved expansion read back, or null when it is not one (another version, a hand edit). */
export function parseSavedExpansion(raw: unknown): SavedExpansion | null {
  if (typeof raw !== "object" || raw === null) return null;
  const o = raw as Record<string, unknown>;
  if (o.base !== "auto" && o.base !== "all" && o.base !== "none") return null;
  if (typeof o.toggled !== "object" || o.toggled === null || Array.isArray(o.toggled)) return null;
  const toggled: Record<string, boolean> = {};
  for (const [id, v] of Object.entries(o.toggled as Record<string, unknown>)) if (typeof v === "boolean") toggled[id] = v;
  return { base: o.base, toggled };
}
