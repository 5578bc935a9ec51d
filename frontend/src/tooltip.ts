/** The text of the heatmap's hover tooltip (pure, so it is unit tested). */
import { formatSteps, formatValue } from "./format";
import type { MetricInfo } from "./metrics";

export interface CellInfo {
  layer: string;
  type: string;
  first: number;
  last: number;
  value: number;
  state: string;
  metric: MetricInfo;
  /** Events of this layer (of the group's layers) whose onset falls in the bin. */
  events: number;
  /** A collapsed group: how many layers it holds. */
  rows?: number;
  /** A collapsed group: the layer whose cell it shows. */
  source?: string;
  /** Steps of the bin a GradScaler skipped (cells.ts). */
  skipped?: number;
  /** The row samples the metric every N steps (N > 1). */
  every?: number;
  /** The value is held from the row's last sample. */
  held?: boolean;
  /** Why the row has none of the metric ("no parameters", ...). */
  empty?: string | null;
}

/** The tooltip's line for steps a GradScaler skipped. */
export const SKIPPED_TEXT = "skipped by GradScaler (inf/NaN gradients)";

/** Lines of the tooltip, first line is the title. */
export function tooltipLines(c: CellInfo): string[] {
  const group = c.rows !== undefined;
  const title = group ? `${c.layer} · worst of ${c.rows} layers` : c.type ? `${c.layer} (${c.type})` : c.layer;
  const lines = [title, formatSteps(c.first, c.last)];
  const n = c.last - c.first + 1;
  if (c.skipped) lines.push(c.skipped >= n ? SKIPPED_TEXT : `${c.skipped} of ${n} steps ${SKIPPED_TEXT}`);
  const value = valueLine(c, group, !!c.skipped && c.skipped >= n);
  if (value) lines.push(value);
  if (c.metric.kind !== "state" && !c.empty && c.every !== undefined && c.every > 1) lines.push(`sampled every ${c.every} steps`);
  // A bin the GradScaler skipped entirely was never judged: no state to show (issue #44: gaps read as health).
  if (!(c.skipped && c.skipped >= n && c.state === "healthy")) lines.push(`state: ${c.state}`);
  if (c.source !== undefined) lines.push(`from ${c.source}`);
  if (c.events > 0) lines.push(c.events === 1 ? "1 event starts here" : `${c.events} events start here`);
  return lines;
}

/** The metric's line of a cell, or null: none for the state map, nor for a
 * blank bin of skipped steps (the skipped line says what it is). */
function valueLine(c: CellInfo, group: boolean, allSkipped: boolean): string | null {
  if (c.metric.kind === "state" || (allSkipped && c.value !== c.value)) return null;
  if (c.empty) return `${c.metric.label}: none (${c.empty})`;
  if (c.held) return `${c.metric.label}: ${formatValue(c.value)} (held from the last sample)`;
  // A bin's value is its extreme when healthy, else the value where the worst state starts (docs/API.md).
  const what =
    (c.first === c.last && !group) || c.state === "no data"
      ? c.metric.label
      : c.state === "healthy"
        ? `${c.metric.label} (extreme of ${group ? "group" : "bin"})`
        : `${c.metric.label} (first ${c.state} step)`;
  return `${what}: ${formatValue(c.value)}`;
}
