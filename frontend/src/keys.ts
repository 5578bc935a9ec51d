import { RowKind } from "./tree";

/**
 * The heatmap's keyboard map, as a pure function from a key press and the
 * cursor to an action (so it is unit tested without a DOM):
 *   arrows move the cursor cell, Home/End jump to the first/last column,
 *   PageUp/PageDown move 10 rows, Enter/Space open the layer, + and - zoom
 *   around the cursor, [ ] and Shift+arrows pan by a quarter, Escape closes.
 */

export type KeyAction =
  | { kind: "move"; row: number; col: number }
  | { kind: "select" }
  | { kind: "zoom"; factor: number }
  | { kind: "pan"; quarters: number }
  | { kind: "escape" };

export const PAGE_ROWS = 10;

/** The action for `key` with the cursor at (row, col) of a rows x cols grid; null = not ours. */
export function keyAction(key: string, shift: boolean, row: number, col: number, rows: number, cols: number): KeyAction | null {
  const move = (r: number, c: number): KeyAction => ({
    kind: "move",
    row: Math.max(0, Math.min(rows - 1, r)),
    col: Math.max(0, Math.min(cols - 1, c)),
  });
  switch (key) {
    case "ArrowLeft":
      return shift ? { kind: "pan", quarters: -1 } : move(row, col - 1);
    case "ArrowRight":
      return shift ? { kind: "pan", quarters: 1 } : move(row, col + 1);
    case "ArrowUp":
      return move(row - 1, col);
    case "ArrowDown":
      return move(row + 1, col);
    case "Home":
      return move(row, 0);
    case "End":
      return move(row, cols - 1);
    case "PageUp":
      return move(row - PAGE_ROWS, col);
    case "PageDown":
      return move(row + PAGE_ROWS, col);
    case "Enter":
    case " ":
      return { kind: "select" };
    case "+":
    case "=":
      return { kind: "zoom", factor: 0.5 };
    case "-":
    case "_":
      return { kind: "zoom", factor: 2 };
    case "[":
      return { kind: "pan", quarters: -1 };
    case "]":
      return { kind: "pan", quarters: 1 };
    case "Escape":
      return { kind: "escape" };
    default:
      return null;
  }
}

export type TreeKeyAction = { kind: "move"; row: number } | { kind: "toggle"; open: boolean } | { kind: "activate" };

/**
 * The row labels' keyboard map (a tree, as WAI-ARIA's tree pattern): Up and
 * Down move, Home/End and PageUp/PageDown jump; Right expands a collapsed
 * group or goes to an expanded one's first child, Left collapses an expanded
 * group or goes to the parent; Enter and Space expand or collapse a group
 * and open a row of data; + expands, - collapses. `kind` is the row's,
 * `parentRow` its parent's row (-1 at the top); null = not ours.
 */
export function treeKeyAction(key: string, row: number, rows: number, kind: RowKind, parentRow: number): TreeKeyAction | null {
  const move = (r: number): TreeKeyAction => ({ kind: "move", row: Math.max(0, Math.min(rows - 1, r)) });
  switch (key) {
    case "ArrowDown":
      return move(row + 1);
    case "ArrowUp":
      return move(row - 1);
    case "Home":
      return move(0);
    case "End":
      return move(rows - 1);
    case "PageDown":
      return move(row + PAGE_ROWS);
    case "PageUp":
      return move(row - PAGE_ROWS);
    case "ArrowRight":
      return kind === RowKind.Group ? { kind: "toggle", open: true } : kind === RowKind.Open ? move(row + 1) : null;
    case "ArrowLeft":
      return kind === RowKind.Open ? { kind: "toggle", open: false } : parentRow >= 0 ? move(parentRow) : null;
    case "Enter":
    case " ":
      return kind === RowKind.Leaf ? { kind: "activate" } : { kind: "toggle", open: kind === RowKind.Group };
    case "+":
    case "=":
      return kind === RowKind.Group ? { kind: "toggle", open: true } : null;
    case "-":
    case "_":
      return kind === RowKind.Open ? { kind: "toggle", open: false } : parentRow >= 0 ? move(parentRow) : null;
    default:
      return null;
  }
}
