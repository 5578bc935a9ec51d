/**
 * Where the rows' view state is kept between page loads.
 *
 * - The runs shown, the filter and the order go into the URL, so a link shared with a
 *   teammate opens the same view. In TensorBoard the tab lives in an
 *   iframe that TensorBoard recreates on a reload, so they go into the
 *   PARENT page's hash, as TensorBoard's own plugin deep links do
 *   (`#neuraldbg&p.neuraldbg.filter=LayerNorm&p.neuraldbg.order=onset`);
 *   TensorBoard keeps that hash across its reload button and a page reload.
 *   Outside an iframe (or where the parent cannot be reached) the page's
 *   own hash holds them.
 * - The expansion (a personal, possibly long list of toggled groups) goes
 *   into localStorage.
 *
 * Pure encoding first (unit tested), then the small part that touches the page.
 */
import { parseSavedExpansion, type RowOrder, type SavedExpansion } from "./treestate";

export const PLUGIN_NAME = "neuraldbg";
const KEY_PREFIX = `p.${PLUGIN_NAME}.`;
const STORAGE_KEY = "neuraldbg.rows.v1";

export interface UrlView {
  filter: string;
  order: RowOrder;
  /**
   * The runs shown (`p.neuraldbg.runs=a,b`), in the order shown; absent when
   * the URL names none (left out of what is read). Left out of a write: the URL's runs are kept.
   */
  runs?: readonly string[];
}

/** A run name as one item of the comma-separated list: its `%` and `,` escaped, so any name round-trips. */
function encodeRunItem(run: string): string {
  return run.replace(/%/g, "%25").replace(/,/g, "%2C");
}

function decodeRunItem(item: string): string | null {
  try {
    return decodeURIComponent(item);
  } catch {
    return null; // Not written by encodeRunItem: dropped.
  }
}

/** The value of `p.neuraldbg.runs` for these runs (before the URL's own encoding). */
export function encodeRuns(runs: readonly string[]): string {
  return runs.map(encodeRunItem).join(",");
}

/** The runs of a `p.neuraldbg.runs` value: empty names and repeats dropped. */
export function decodeRuns(value: string): string[] {
  const out: string[] = [];
  for (const item of value.split(",")) {
    const run = decodeRunItem(item);
    if (run && !out.includes(run)) out.push(run);
  }
  return out;
}

interface HashParts {
  /** TensorBoard's tab (the one bare component), "" if none. */
  tab: string;
  pairs: [string, string][];
}

function splitHash(hash: string): HashParts {
  const parts: HashParts = { tab: "", pairs: [] };
  for (const piece of hash.replace(/^#/, "").split("&")) {
    if (piece === "") continue;
    const eq = piece.indexOf("=");
    if (eq < 0) {
      parts.tab = piece;
      continue;
    }
    try {
      parts.pairs.push([decodeURIComponent(piece.slice(0, eq)), decodeURIComponent(piece.slice(eq + 1))]);
    } catch {
      // A malformed escape: not ours to read; dropped.
    }
  }
  return parts;
}

/** The view a hash holds (the defaults for what it does not hold). */
export function readHashView(hash: string): UrlView {
  const get = (k: string) => splitHash(hash).pairs.find(([key]) => key === KEY_PREFIX + k)?.[1];
  const runs = decodeRuns(get("runs") ?? "");
  return { filter: get("filter") ?? "", order: get("order") === "onset" ? "onset" : "forward", ...(runs.length ? { runs } : {}) };
}

/**
 * `hash` holding `view` (defaults left out), everything else kept; `tab`,
 * when given, is set where the hash names no tab. Null when the hash shows
 * another tab (a hidden tab must not rewrite the visible one's URL).
 */
export function writeHashView(hash: string, view: UrlView, tab = ""): string | null {
  const parts = splitHash(hash);
  if (tab && parts.tab && parts.tab !== tab) return null;
  const runsKey = `${KEY_PREFIX}runs`;
  const keptRuns = view.runs ? [] : parts.pairs.filter(([k]) => k === runsKey);
  const pairs = parts.pairs.filter(([k]) => !k.startsWith(KEY_PREFIX));
  if (view.runs?.length) pairs.push([runsKey, encodeRuns(view.runs)]);
  pairs.push(...keptRuns);
  if (view.filter) pairs.push([`${KEY_PREFIX}filter`, view.filter]);
  if (view.order !== "forward") pairs.push([`${KEY_PREFIX}order`, view.order]);
  const pieces = [parts.tab || tab, ...pairs.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)].filter((p) => p);
  return pieces.length ? `#${pieces.join("&")}` : "";
}

/** The page whose hash keeps the view: TensorBoard's (the parent) when reachable, else this one. */
function hashWindow(win: Window): { w: Window; tab: string } {
  try {
    if (win.parent && win.parent !== win) {
      void win.parent.location.hash; // throws when the parent is another origin
      return { w: win.parent, tab: PLUGIN_NAME };
    }
  } catch {
    // Another origin: keep the view in this frame's own hash.
  }
  return { w: win, tab: "" };
}

/** Reads and writes the view state of the rows (URL and localStorage). */
export class ViewStore {
  constructor(private readonly win: Window = window) {}

  readUrl(): UrlView {
    return readHashView(hashWindow(this.win).w.location.hash);
  }

  /** Replace the URL's view (no new history entry, no hashchange for TensorBoard to act on). */
  writeUrl(view: UrlView): void {
    const { w, tab } = hashWindow(this.win);
    const hash = writeHashView(w.location.hash, view, tab);
    if (hash === null || hash === w.location.hash || (hash === "" && w.location.hash === "")) return;
    const url = `${w.location.pathname}${w.location.search}${hash}`;
    try {
      w.history.replaceState(w.history.state, "", url);
    } catch {
      // A sandboxed frame may not touch history: the view just is not kept.
    }
  }

  readExpansion(): SavedExpansion | null {
    try {
      const raw = this.win.localStorage.getItem(STORAGE_KEY);
      return raw ? parseSavedExpansion(JSON.parse(raw)) : null;
    } catch {
      return null;
    }
  }

  writeExpansion(saved: SavedExpansion): void {
    try {
      this.win.localStorage.setItem(STORAGE_KEY, JSON.stringify(saved));
    } catch {
      // Storage full or disabled: the expansion lasts for this page only.
    }
  }
}
