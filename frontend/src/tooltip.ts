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
}

/** Lines of the tooltip, first line is the title. */
export function tooltipLines(c: CellInfo): string[] {
  const group = c.rows !== undefined;
  const title = group ? `${c.layer} · worst of ${c.rows} layers` : c.type ? `${c.layer} (${c.type})` : c.layer;
  const lines = [title, formatSteps(c.first, c.last)];
  if (c.metric.kind !== "state") {
    // A bin's value is its extreme when healthy, else the value where the worst state starts (docs/API.md).
    const what =
      (c.first === c.last && !group) || c.state === "no data"
        ? c.metric.label
        : c.state === "healthy"
          ? `${c.metric.label} (extreme of ${group ? "group" : "bin"})`
          : `${c.metric.label} (first ${c.state} step)`;
    lines.push(`${what}: ${formatValue(c.value)}`);
  }
  lines.push(`state: ${c.state}`);
  if (c.source !== undefined) lines.push(`from ${c.source}`);
  if (c.events > 0) lines.push(c.events === 1 ? "1 event starts here" : `${c.events} events start here`);
  return lines;
}
