/** Text formatting shared by the tooltip, axes, lists and panels. */

/** A compact, human number: 3 significant digits, exponent for tiny/huge. */
export function formatValue(v: number): string {
  if (Number.isNaN(v)) return "no data";
  if (v === Infinity) return "+inf";
  if (v === -Infinity) return "-inf";
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1e4 || a < 1e-3) {
    const [m, e] = v.toExponential(2).split("e");
    return `${trimZeros(m)}e${e.replace("+", "")}`;
  }
  return trimZeros(v.toPrecision(3));
}

function trimZeros(s: string): string {
  return s.includes(".") ? s.replace(/0+$/, "").replace(/\.$/, "") : s;
}

/** "step 47" or "steps 40–59" for a bin. */
export function formatSteps(first: number, last: number): string {
  return first === last ? `step ${first}` : `steps ${first}–${last}`;
}

/** "vanishing_gradient" -> "Vanishing gradient". */
export function humanize(id: string): string {
  const s = id.replace(/_/g, " ").trim();
  return s ? s[0].toUpperCase() + s.slice(1) : s;
}

/** Step axis tick positions: about `target` round numbers within [start, end]. */
export function niceTicks(start: number, end: number, target: number): number[] {
  const span = Math.max(1, end - start);
  const raw = span / Math.max(1, target);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / mag;
  const step = Math.max(1, (norm < 1.5 ? 1 : norm < 3.5 ? 2 : norm < 7.5 ? 5 : 10) * mag);
  const ticks: number[] = [];
  for (let t = Math.ceil(start / step) * step; t <= end; t += step) ticks.push(t);
  return ticks;
}
