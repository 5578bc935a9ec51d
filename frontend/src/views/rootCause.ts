/** The root-cause panel: what failed, where, when, what to try, and a jump button. */
import { el, setChildren } from "../dom";
import { adviceParts, causeTitle } from "../banner";
import { CLASS } from "../styles";
import type { RunInfo } from "../types";

export class RootCausePanel {
  readonly element = el("section", { class: `${CLASS.card} nd-rootcause`, attrs: { "aria-live": "polite" } });

  constructor(private readonly onJump: (run: string) => void) {}

  update(info: RunInfo | null, compared: number): void {
    if (!info) {
      this.element.style.display = "none";
      return;
    }
    this.element.style.display = "";
    const rc = info.root_cause;
    // A run can be "healthy" (no error event) yet have a first warning: amber, not red.
    const warning = !!rc && info.status !== "failing";
    this.element.classList.toggle("nd-healthy", !rc);
    this.element.classList.toggle("nd-warning", warning);
    const runNote = compared > 1 ? ` (run ${info.run})` : "";
    if (!rc) {
      const what = info.status === "failing" ? "Failing, no single root cause found" : "No failure detected";
      setChildren(this.element, [
        el("div", { class: "nd-rootcause-text" }, [
          el("div", { class: "nd-rootcause-head", text: `${what}${runNote}` }),
          el("div", {
            class: "nd-rootcause-where",
            text: `${info.num_steps} steps, ${info.num_layers} layers, ${info.num_events} event${info.num_events === 1 ? "" : "s"}.`,
          }),
        ]),
      ]);
      return;
    }
    setChildren(this.element, [
      el("div", { class: "nd-rootcause-text", attrs: { "data-testid": "root-cause" } }, [
        el("div", { class: "nd-rootcause-head", text: `${warning ? "First warning" : "Root cause"}: ${causeTitle(rc.kind, rc.layer, rc.message)}${runNote}` }),
        el("div", { class: "nd-rootcause-where" }, [
          "in ",
          el("code", { text: rc.layer, attrs: { "data-layer": rc.layer } }),
          ` from step ${rc.step}`,
        ]),
        ...adviceLines(rc.message),
      ]),
      el("button", {
        class: warning ? `${CLASS.btn} nd-btn-warning` : `${CLASS.btn} nd-btn-primary`,
        text: "Jump there",
        attrs: { type: "button", title: `Zoom the heatmap to ${rc.layer} at step ${rc.step}` },
        on: { click: () => this.onJump(info.run) },
      }),
    ]);
  }
}

/** "What to try:", then "Likely cause:" and "Seen:" on lines of their own. */
function adviceLines(message: string): HTMLElement[] {
  const p = adviceParts(message);
  const line = (cls: string, label: string, text: string) => el("div", { class: cls }, [el("b", { text: label }), text]);
  const lines: HTMLElement[] = [line("nd-rootcause-try", "What to try:", p.advice || "See the layer's events.")];
  if (p.likely) lines.push(line("nd-rootcause-likely", "Likely cause:", p.likely));
  if (p.seen) lines.push(line("nd-rootcause-seen", "Seen:", p.seen));
  return lines;
}
