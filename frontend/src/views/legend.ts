/** The legend: the healthy colour ramp with its value range, and every failing state. */
import { rampColor, scaleValue, type Scale } from "../colormap";
import { el, setChildren, swatch } from "../dom";
import { formatValue } from "../format";
import type { MetricInfo } from "../metrics";
import { NO_DATA_LABEL, STATE_HEALTHY, type StateTable } from "../states";
import { CLASS } from "../styles";
import { SKIPPED_TEXT } from "../tooltip";

const SKIPPED_SWATCH = "repeating-linear-gradient(135deg, rgba(75,85,99,.8) 0 1px, #f3f4f6 1px 4px)";

export class Legend {
  readonly element = el("section", { class: CLASS.card, attrs: { "aria-label": "Legend" } });

  /** `present`: state codes that appear in the shown data (listed in bold). */
  update(metric: MetricInfo, scale: Scale, states: StateTable, present: ReadonlySet<number>): void {
    const parts: HTMLElement[] = [el("h2", { text: "Legend" })];
    if (metric.kind === "state") {
      parts.push(el("div", { class: "nd-legend-title" }, [swatch(states.healthyColor()), ` ${states.name(STATE_HEALTHY)}`]));
    } else {
      const stops = Array.from({ length: 9 }, (_, i) => rampColor(i / 8)).join(", ");
      parts.push(
        el("div", { class: "nd-legend-title", text: `${metric.label}, healthy cells${metric.kind === "log" ? " (log scale)" : ""}` }),
        el("div", { class: "nd-legend-ramp", style: { background: `linear-gradient(to right, ${stops})` } }),
        el("div", { class: "nd-legend-scale" }, [
          el("span", { text: `≤${formatValue(scaleValue(scale, 0))}` }),
          el("span", { text: formatValue(scaleValue(scale, 0.5)) }),
          el("span", { text: `≥${formatValue(scaleValue(scale, 1))}` }),
        ]),
      );
    }
    const items = states.failing().map((s) =>
      el("li", { class: present.has(s.code) ? "nd-present" : "", attrs: { title: `${s.name} (${s.severity})` } }, [
        swatch(s.color),
        s.label,
      ]),
    );
    items.push(el("li", {}, [swatch(states.colors.no_data), NO_DATA_LABEL]));
    parts.push(el("ul", { class: "nd-legend-list" }, items));
    // Below the states, hatched as the heatmap hatches them (paint.ts): a skipped step is not a state.
    parts.push(el("div", { class: "nd-legend-note", attrs: { title: SKIPPED_TEXT } }, [swatch(SKIPPED_SWATCH), "step skipped by GradScaler"]));
    setChildren(this.element, parts);
  }
}
