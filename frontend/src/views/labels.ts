/** Row-label text sizing: the label column's width and names cut to fit it. */

const LABEL_FONT = "11px ui-monospace, SFMono-Regular, Menlo, monospace";
let measurer: CanvasRenderingContext2D | null = null;

export const LABEL_MAX = 200;

function measure(text: string): number {
  measurer ??= document.createElement("canvas").getContext("2d");
  if (!measurer) return text.length * 7;
  measurer.font = LABEL_FONT;
  return measurer.measureText(text).width;
}

/** Width (css px) of the label column: the longest name, within [48, LABEL_MAX]. */
export function labelWidth(names: readonly string[]): number {
  let w = 0;
  for (const n of names) w = Math.max(w, measure(n));
  return Math.round(Math.min(LABEL_MAX, Math.max(48, w + 22)));
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

