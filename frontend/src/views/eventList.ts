/**
 * The event list of the primary run, synced with the heatmap: hovering or
 * focusing an event points the heatmap at its cell, clicking it moves there.
 */
import { el, setChildren, swatch } from "../dom";
import { humanize } from "../format";
import type { StateTable } from "../states";
import { CLASS } from "../styles";
import type { EventList, NdEvent, RootCause, StepRange } from "../types";

export interface EventListCallbacks {
  onHover(ev: NdEvent | null): void;
  onClick(ev: NdEvent): void;
}

export function isRootEvent(ev: NdEvent, rc: RootCause | null): boolean {
  return !!rc && ev.layer === rc.layer && ev.step === rc.step && ev.kind === rc.kind;
}

export class EventListView {
  readonly element: HTMLElement;
  private readonly title = el("h2");
  /** Whose events these are, when several runs are shown. */
  private readonly runLine = el("div", { class: "nd-events-run", attrs: { "data-testid": "events-run" } });
  private readonly list = el("ul", { class: "nd-eventlist", attrs: { "aria-label": "Events" } });
  private readonly foot = el("div", { class: CLASS.statusLine });
  private items: { ev: NdEvent; button: HTMLButtonElement }[] = [];
  private shown: { run: string | null; data: EventList | null; states: StateTable | null } = { run: null, data: null, states: null };

  constructor(private readonly cb: EventListCallbacks) {
    this.element = el("section", { class: `${CLASS.card} nd-events-col`, attrs: { "data-testid": "events" } }, [this.title, this.runLine, this.list, this.foot]);
  }

  /** Rebuild the list; a no-op when the same answer is already shown (keeps hover/focus). */
  update(run: string | null, data: EventList | null, rc: RootCause | null, states: StateTable, compared = 1): void {
    this.runLine.textContent = run && compared > 1 ? `run ${run}` : "";
    this.runLine.style.display = run && compared > 1 ? "" : "none";
    if (run) this.runLine.title = run;
    if (this.shown.data && this.shown.run === run && this.shown.data === data && this.shown.states === states) return;
    this.shown = { run, data, states };
    if (run) this.element.setAttribute("data-run", run);
    else this.element.removeAttribute("data-run");
    this.title.textContent = data ? `Events · ${data.total}` : "Events";
    this.foot.textContent = data?.truncated ? `showing the first ${data.events.length} of ${data.total}` : "";
    if (!run || !data) {
      setChildren(this.list, [el("li", { class: CLASS.note, text: run ? "Loading…" : "No run selected." })]);
      this.items = [];
      return;
    }
    if (data.events.length === 0) {
      setChildren(this.list, [el("li", { class: CLASS.note, text: "No events: every layer stayed healthy." })]);
      this.items = [];
      return;
    }
    // One root-cause marker: two events can match it (a non-finite output
    // and gradient of one layer at one step); the first is marked.
    const rootAt = data.events.findIndex((ev) => isRootEvent(ev, rc));
    this.items = data.events.map((ev, i) => {
      const root = i === rootAt;
      const button = el(
        "button",
        {
          class: "nd-event",
          attrs: { type: "button", "data-layer": ev.layer, "data-step": ev.step, "data-kind": ev.kind, "data-root": root },
          on: {
            mouseenter: () => this.cb.onHover(ev),
            mouseleave: () => this.cb.onHover(null),
            focus: () => this.cb.onHover(ev),
            blur: () => this.cb.onHover(null),
            click: () => this.cb.onClick(ev),
          },
        },
        [
          swatch(states.colorOf(ev.to_state)),
          el("span", { class: "nd-event-top" }, [
            el("span", { class: "nd-event-step", text: `step ${ev.step}` }),
            el("span", { class: "nd-event-layer", text: ev.layer, attrs: { title: ev.layer } }),
            root ? el("span", { class: "nd-tag-root", text: "root cause" }) : null,
          ]),
          el("span", { class: "nd-event-kind", text: `${humanize(ev.kind)} · ${ev.severity}` }),
          el("span", { class: "nd-event-msg", text: ev.message, attrs: { title: ev.message } }),
        ],
      );
      return { ev, button };
    });
    setChildren(this.list, this.items.map((i) => el("li", {}, [i.button])));
  }

  /** Dim events outside the shown steps; mark those of the selected layer. */
  sync(range: StepRange | null, layer: string | null): void {
    for (const { ev, button } of this.items) {
      button.classList.toggle(CLASS.outside, !!range && (ev.step < range.start || ev.step > range.end));
      button.classList.toggle(CLASS.active, layer !== null && ev.layer === layer);
    }
  }
}
