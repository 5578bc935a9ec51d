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
  /** Events of this layer whose onset falls in the bin. */
  events: number;
}

/** Lines of the tooltip, first line is the title. */
export function tooltipLines(c: CellInfo): string[] {
  const lines = [c.type ? `${c.layer} (${c.type})` : c.layer, formatSteps(c.first, c.last)];
  if (c.metric.kind !== "state") {
    // A bin's value is its extreme when healthy, else the value where the worst state starts (docs/API.md).
    const what =
      c.first === c.last || c.state === "no data"
        ? c.metric.label
        : c.state === "healthy"
          ? `${c.metric.label} (extreme of bin)`
          : `${c.metric.label} (first ${c.state} step)`;
    lines.push(`${what}: ${formatValue(c.value)}`);
  }
  lines.push(`state: ${c.state}`);
  if (c.events > 0) lines.push(c.events === 1 ? "1 event starts here" : `${c.events} events start here`);
  return lines;
}
