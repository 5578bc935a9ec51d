"""The terminal report: one run or a whole report as plain text of a given width.

Renders the report JSON of :mod:`tb_neuraldbg.format.contract`. Layer names
and messages come from a logdir: control characters never reach the terminal,
and one string shows at most ``MAX_TEXT`` characters (the JSON keeps it
whole). Rendering is linear in what is shown.
"""

from __future__ import annotations

import os
import unicodedata
from typing import Mapping

from ..diagnosis.explain import value_label
from ..format.contract import is_root_event

__all__ = ["DEFAULT_MAX_EVENTS", "MAX_TEXT", "MAX_NOTES", "format_report"]

_SEVERITY_LABEL = {"error": "ERROR", "warning": "WARN", "info": "info"}
# Timeline entries shown per run in the terminal (the JSON keeps everything).
DEFAULT_MAX_EVENTS = 60
# Characters of one message or name shown (a 10 MB message is not read on a terminal).
MAX_TEXT = 2000
# Note lines shown per run, and for the logdir.
MAX_NOTES = 8
# Characters of a name (run, layer, state) shown: it is clipped to the width anyway.
_NAME = 300


# ---------------------------------------------------------------------------
# Terminal text


def _printable(text: str, limit: int = MAX_TEXT) -> str:
    """Text safe for a terminal: control and format characters are escaped,
    and at most ``limit`` characters are kept (a cut says how much is left).

    Layer names and messages come from a logdir; an ANSI escape in one must
    not be able to rewrite the user's screen.
    """
    if len(text) > limit:
        rest = len(text) - limit
        return _printable(text[:limit], limit) + f" [... {rest} more characters; --json has all]"
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch == "\n" or ch == "\t":
            out.append(" ")
        elif cat[0] == "C" or cat in ("Zl", "Zp"):
            out.append(ch.encode("unicode_escape").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out)


def _char_width(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _width(text: str) -> int:
    """Columns the (already printable) text takes in a terminal."""
    return sum(_char_width(ch) for ch in text)


def _take(text: str, cols: int, from_right: bool = False) -> str:
    """The longest start (or end) of ``text`` that fits in ``cols`` columns."""
    out, used = [], 0
    for ch in reversed(text) if from_right else text:
        w = _char_width(ch)
        if used + w > cols:
            break
        out.append(ch)
        used += w
    return "".join(reversed(out) if from_right else out)


def _clip(text: str, width: int) -> str:
    """Text cut to at most ``width`` columns, with "~" marking a cut."""
    if _width(text) <= width:
        return text
    return _take(text, width - 1) + "~"


def _clip_middle(text: str, width: int) -> str:
    """Long dotted layer names keep their start and their most specific end."""
    if _width(text) <= width or width < 8:
        return _clip(text, width)
    head = (width - 1) // 2
    return _take(text, head) + "~" + _take(text, width - 1 - head, from_right=True)


def _pad(text: str, width: int) -> str:
    return text + " " * max(0, width - _width(text))


def _pieces(word: str, avail: int) -> list[str]:
    """``word`` split into pieces of at most ``avail`` columns (at least one
    character each), in one pass."""
    out, start, used = [], 0, 0
    for i, ch in enumerate(word):
        w = _char_width(ch)
        if used + w > avail and i > start:
            out.append(word[start:i])
            start, used = i, 0
        used += w
    out.append(word[start:])
    return out


def _wrap(text: str, width: int, indent: str) -> list[str]:
    """Greedy word wrap to ``width`` terminal columns (wide characters count
    two; words longer than a line are split), each line prefixed by
    ``indent``. Linear in the length of ``text``."""
    avail = max(1, width - _width(indent))
    lines: list[str] = []
    line, used = "", 0
    for word in text.split():
        w = _width(word)
        if w > avail:  # an over-long word starts a line of its own
            if line:
                lines.append(line)
            *full, word = _pieces(word, avail)
            lines += full
            line, used = word, _width(word)
        elif line and used + 1 + w <= avail:
            line, used = f"{line} {word}", used + 1 + w
        elif line:
            lines.append(line)
            line, used = word, w
        else:
            line, used = word, w
    if line or not lines:
        lines.append(line)
    return [indent + l for l in lines]


def _event_counts(events: list[dict]) -> str:
    parts = []
    for sev, singular, plural in (("error", "error", "errors"), ("warning", "warning", "warnings"),
                                  ("info", "info", "info")):
        n = sum(1 for e in events if e["severity"] == sev)
        if n:
            parts.append(f"{n} {singular if n == 1 else plural}")
    return ", ".join(parts)


def _group_events(events: list[dict], root: Mapping | None, compact: bool) -> list[list[dict]]:
    """Timeline entries in step order. With ``compact``, events of one step
    with the same kind, transition and severity share an entry (a NaN that
    spreads through ten layers is one line, not ten); the root-cause event
    always stands alone."""
    groups: list[list[dict]] = []
    open_groups: dict = {}  # key -> index in groups, for the current step only
    step = None
    for e in events:
        if e["step"] != step:
            step, open_groups = e["step"], {}
        key = (e["kind"], e["from_state"], e["to_state"], e["severity"])
        if compact and not is_root_event(e, root) and key in open_groups:
            groups[open_groups[key]].append(e)
            continue
        groups.append([e])
        if not is_root_event(e, root):
            open_groups[key] = len(groups) - 1
    return groups


def _select_groups(groups: list[list[dict]], max_entries: int) -> list[list[dict]]:
    """At most ``max_entries`` entries in step order: errors first, then the earliest."""
    if len(groups) <= max_entries:
        return groups
    chosen = set([i for i, g in enumerate(groups) if g[0]["severity"] == "error"][:max_entries])
    for i in range(len(groups)):
        if len(chosen) >= max_entries:
            break
        chosen.add(i)
    return [groups[i] for i in sorted(chosen)]


def _notes_block(title: str, notes, width: int) -> list[str]:
    """``title``, then at most MAX_NOTES of ``notes`` as wrapped "- " items."""
    notes = [str(n) for n in notes or ()]
    if not notes:
        return []
    lines = _wrap(title, width, "")
    for n in notes[:MAX_NOTES]:
        item = _wrap(_printable(n, 400), width, "    ")
        lines += ["  - " + item[0][4:]] + item[1:]
    if len(notes) > MAX_NOTES:
        lines.append(f"  ... {len(notes) - MAX_NOTES} more (all are in --json)")
    return lines


def run_title(name: str, logdir: str | None) -> str:
    """The name a reader knows a run by: TensorBoard calls a logdir that is
    itself a run ".", which says nothing in a heading; the directory's own
    name does (the JSON keeps "." as the run's name)."""
    if name != "." or not logdir:
        return name
    path = logdir.rstrip("/\\")
    if "://" not in path:
        path = os.path.abspath(path or ".")
    return os.path.basename(path) or name


def _format_header(run: Mapping, width: int, logdir: str | None = None) -> list[str]:
    """Title with the status at the right (and "incomplete" when data of the
    run could not be read), then the root cause."""
    status = str(run.get("status", ""))
    badge = "FAILING" if status == "failing" else "healthy"
    if status != "failing" and run.get("root_cause"):
        badge = "healthy, with warnings"  # (its warnings were all resolved: DESIGN.md, Severity and status)
    if run.get("incomplete"):
        badge = "FAILING, incomplete" if status == "failing" else "incomplete"
    room = width - len(badge) - 2
    title = _clip(f"run {_printable(run_title(str(run.get('run', '')), logdir), _NAME)}", room)
    lines = [_pad(title, room) + "  " + badge, "=" * width]
    root = run.get("root_cause")
    if root:
        layer = _printable(str(root.get("layer", "")), _NAME)
        kind = _printable(str(root.get("kind", "")), _NAME)
        lines += _wrap(f"Root cause: {layer}: {kind} at step {root.get('step')}", width, "")
        # (the root cause's message leads with the advice, as in the tab)
        lines += _wrap("What to try: " + _printable(str(root.get("message", ""))), width, "  ")
    elif status == "failing":
        lines.append("Root cause: not determined")
    else:
        lines.append("No failure found.")
    return lines


def _layer_list_text(names: list[str], cols: int) -> str:
    """ "a, b, c" fitted into ``cols`` columns, ending "+N more" when cut."""
    text = ""
    for k, name in enumerate(names):
        candidate = f"{text}, {name}" if text else name
        rest = len(names) - k - 1
        suffix = f", +{rest} more" if rest else ""
        if _width(candidate + suffix) > cols:
            more = f"+{len(names) - k} more"
            return f"{text}, {more}" if text else _clip(name, cols - len(more) - 2) + ", " + more
        text = candidate
    return text


def _format_entry(group: list[dict], is_root: bool, step_w: int, sev_w: int, width: int) -> list[str]:
    """One timeline entry: "  step  SEV  layer(s)  kind  from -> to  value",
    then the message indented below. The root-cause event is marked ">"."""
    e = group[0]
    sev = _SEVERITY_LABEL.get(e["severity"], _printable(str(e["severity"]), _NAME))
    prefix = f"{'> ' if is_root else '  '}{str(e['step']).rjust(step_w)}  {sev.ljust(sev_w)}  "
    indent = " " * len(prefix)
    transition = (f"{_printable(str(e['from_state']), _NAME)} -> "
                  f"{_printable(str(e['to_state']), _NAME)}")
    tail = f"{_printable(str(e['kind']), _NAME)}  {transition}"
    if len(group) == 1 and e.get("value") is not None:
        # the value says what it measures (the tab's metric label)
        # (an event's extras, "cause" and the like, follow its contract keys)
        label = value_label(str(e["kind"]), str(e["layer"]), e)
        tail += f"  {_printable(label, _NAME)} {e['value']:.3g}"
    names = list(dict.fromkeys(_printable(str(x["layer"]), _NAME) for x in group))
    layer = ", ".join(names)
    if len(prefix) + _width(layer) + 2 + _width(tail) <= width:
        lines = [f"{prefix}{layer}  {tail}"]
    else:
        # The layer names are the key fact: give them the line, the rest below.
        room = width - len(prefix)
        first = _clip_middle(layer, room) if len(names) == 1 else _layer_list_text(names, room)
        lines = [prefix + first] + _wrap(tail, width, indent)
    message = _printable(str(e["message"]))
    if len(group) > 1:
        message += f" (+{len(group) - 1} similar; --all lists each)"
    return lines + _wrap(message, width, indent)


def _format_run(run: Mapping, width: int, max_events: int, compact: bool,
                logdir: str | None = None) -> list[str]:
    lines = _format_header(run, width, logdir)
    if run.get("incomplete"):
        title = ("Incomplete: part of this run could not be read, so its diagnosis may miss "
                 "what that part held:")
        lines += [""] + _notes_block(title, run.get("warnings") or ["(no detail)"], width)
    elif run.get("warnings"):
        lines += [""] + _notes_block("Notes:", run["warnings"], width)
    lines.append("")
    events = list(run.get("events") or [])
    if not events:
        return lines + ["Timeline: no events."]
    lines.append(f"Timeline ({_event_counts(events)}):")
    root = run.get("root_cause")
    groups = _group_events(events, root, compact)
    shown = _select_groups(groups, max_events)
    step_w = max(len(str(g[0]["step"])) for g in shown)
    sev_w = max(len(_SEVERITY_LABEL.get(g[0]["severity"], str(g[0]["severity"]))) for g in shown)
    for g in shown:
        lines += _format_entry(g, len(g) == 1 and is_root_event(g[0], root), step_w, sev_w, width)
    hidden = len(events) - sum(len(g) for g in shown)
    if hidden:
        lines.append(f"  ... {hidden} more events not shown (all are in --json)")
    return lines


def format_report(
    report: Mapping,
    width: int = 80,
    max_events: int = DEFAULT_MAX_EVENTS,
    compact: bool = True,
    logdir: str | None = None,
) -> str:
    """Plain-text report, every line at most ``width`` columns.

    ``report`` is one run (``run_report``'s dict) or the whole
    ``{"runs": [...]}`` object. Per run: the status, the root cause first,
    then the timeline of events in step order, each with its message. With
    ``compact``, events of one step that share kind, transition and severity
    form one entry. At most ``max_events`` entries are listed per run (errors
    are kept first); the JSON report always has everything. ``logdir``: the
    directory reported on, to name a run TensorBoard calls "." by it.
    """
    width = max(40, int(width))
    runs = report["runs"] if "runs" in report else [report]
    if not runs:
        notes = report.get("notes") if "runs" in report else None
        tail = _notes_block("Not read:", notes, width)
        return "\n".join(["No runs with neuraldbg data."] + ([""] + tail if tail else [])) + "\n"
    blocks = []
    for run in runs:
        blocks.append("\n".join(line.rstrip() for line in _format_run(run, width, max_events, compact, logdir)))
    if len(runs) > 1:
        failing = sum(1 for r in runs if r.get("status") == "failing")
        summary = f"{len(runs)} runs: {failing} failing, {len(runs) - failing} healthy"
        incomplete = sum(1 for r in runs if r.get("incomplete"))
        if incomplete:
            summary += f" ({incomplete} incomplete)"
        blocks.append(summary)
    notes = report.get("notes") if "runs" in report else None
    if notes:
        blocks.append("\n".join(l.rstrip() for l in _notes_block("Not read:", notes, width)))
    return "\n\n".join(blocks) + "\n"
