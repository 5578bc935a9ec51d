"""A self-contained static HTML report of a logdir (``neuraldbg export``).

One file, no script, no external resource: it opens from a CI artifact or an
e-mail attachment as it is. Per run: the status, the root cause, a layer x
step map of the stored states (binned with the plugin's rule, so a single
failing step stays visible) as inline SVG with steps labelled along its axis,
and the event table.

A layer name is never broken inside a word: it wraps only after a dot of its
module path (``<wbr>``), and a map label too long for its column keeps its
last whole segments behind an ellipsis, the full name in its title
(tests/test_html_report_names.py, tests/test_browser_runs.py).

Every string from the logdir is escaped (``html.escape``); nothing from it is
ever placed in markup unescaped.
"""

from __future__ import annotations

import html
import math
from typing import Iterable, Mapping, Sequence

import numpy as np

from .._version import __version__
from ..format import metadata
from ..format.contract import is_root_event
from ..format.event_states import apply_spans, event_spans
from ..format.binning import STATE_METRIC, bin_heatmap
from .text_report import run_title

__all__ = ["STATE_COLORS", "axis_ticks", "map_label", "render_html"]

# Colours and labels come from the state table (format/metadata.py), as the tab's do.
STATE_COLORS = {s.name: s.color for s in metadata.STATE_TABLE}

_CELL_H = 14
_LABEL_W = 230
_MAP_W = 720
# Lines of notes listed per run and for the logdir (the JSON report has all).
_MAX_NOTES = 50
# Events listed per run (the root-cause event always is), characters of a message.
_MAX_EVENTS = 5000
_MAX_TEXT = 10_000
_MAX_NAME = 1000
# Characters of a layer name in the map's label column (its title has the whole name).
_LABEL_CHARS = 36
# About this many css px between two step ticks of the map's axis.
_TICK_PX = 90

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 6px;overflow-wrap:anywhere}
.meta{color:#666;font-size:12px}
.badge{display:inline-block;padding:1px 8px;border-radius:9px;font-size:12px;font-weight:600;vertical-align:middle}
.failing{background:#fde2e1;color:#a11}.healthy{background:#e3f3e6;color:#174}
.incomplete{background:#fff0c2;color:#850}
.notes{border-left:4px solid #d9a400;background:#fffbea;padding:6px 10px;margin:8px 0;font-size:13px}
.notes li{word-break:break-all}
.cause{border-left:4px solid #d62728;background:#fff6f6;padding:6px 10px;margin:8px 0}
.ok{border-left:4px solid #2a8;background:#f4fbf6;padding:6px 10px;margin:8px 0}
table{border-collapse:collapse;width:100%;font-size:13px;margin-top:8px}
th,td{border-bottom:1px solid #e5e5e5;padding:3px 6px;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.root td{background:#fff1d6} .error{color:#b00;font-weight:600} .warning{color:#a60}
.info{color:#666} code{font-size:12px;word-break:break-all}
code.name{word-break:normal;overflow-wrap:normal}
.legend span{display:inline-block;margin:0 10px 2px 0;font-size:12px}
.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px;border:1px solid #0002}
svg text{font:11px system-ui,sans-serif}
"""


def _e(value) -> str:
    return html.escape(str(value), quote=True)


_color = metadata.state_color
_state_label = metadata.state_label


def _name_html(name: str) -> str:
    """A layer name as markup that wraps only after the dots of its module path."""
    return ".<wbr>".join(_e(part) for part in _cut(name, _MAX_NAME).split("."))


def map_label(name: str, limit: int = _LABEL_CHARS) -> str:
    """A layer's label in the map: the whole name when it fits, else its last
    whole path segments that fit behind "\u2026" (the end says which module it
    is), else the last segment cut with an ellipsis."""
    if len(name) <= limit:
        return name
    segs = name.split(".")
    tail = segs.pop()
    if len(tail) + 1 > limit:
        return tail[: limit - 1] + "\u2026"
    while segs and len(segs[-1]) + 1 + len(tail) + 1 <= limit:
        tail = f"{segs.pop()}.{tail}"
    return "\u2026" + tail


def axis_ticks(first: int, last: int, target: int) -> list[int]:
    """Round steps (1, 2 or 5 times a power of ten apart) from first to last, about ``target`` of them."""
    span = max(1, last - first)
    raw = span / max(1, target)
    mag = 10 ** math.floor(math.log10(raw))
    norm = raw / mag
    step = max(1, round((1 if norm < 1.5 else 2 if norm < 3.5 else 5 if norm < 7.5 else 10) * mag))
    return list(range(-(-first // step) * step, last + 1, step))


def _step_x(hm, step: int, cell_w: float) -> float:
    """x of a step inside the map (the bins may hold several steps, unevenly)."""
    starts, ends = hm.col_start, hm.col_end
    c = int(np.searchsorted(starts, step, side="right")) - 1
    c = min(max(c, 0), len(starts) - 1)
    width = max(1, int(ends[c]) - int(starts[c]) + 1)
    frac = min(1.0, max(0.0, (step - int(starts[c]) + 0.5) / width))
    return _LABEL_W + (c + frac) * cell_w


def _state_map(layers: Sequence[str], steps: np.ndarray, states: np.ndarray,
               root_layer: str | None, max_cols: int) -> str:
    """Inline SVG: one row per layer, one column per step bin, worst state per bin.

    Equal neighbouring cells of a row are merged into one rectangle, so the
    size grows with the number of state changes, not with the steps.
    """
    if len(steps) == 0 or not layers:
        return "<p class='meta'>No statistics stored.</p>"
    hm = bin_heatmap(steps, None, states, max_cols, STATE_METRIC)
    cols = hm.states.shape[1]
    cell_w = _MAP_W / cols
    height = len(layers) * _CELL_H + 22
    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{_LABEL_W + _MAP_W + 4}' "
        f"height='{height}' role='img' aria-label='layer state map'>"
    ]
    for row, name in enumerate(layers):
        y = row * _CELL_H
        weight = " font-weight='700' fill='#b00'" if name == root_layer else ""
        label = map_label(name)
        out.append(
            f"<text class='layer' x='{_LABEL_W - 6}' y='{y + _CELL_H - 3}' text-anchor='end'{weight}>"
            f"<title>{_e(name)}</title>{_e(label)}</text>"
        )
        codes = hm.states[row]
        start = 0
        for c in range(1, cols + 1):
            if c < cols and codes[c] == codes[start]:
                continue
            x = _LABEL_W + start * cell_w
            w = (c - start) * cell_w
            tip = (f"{name}: {_state_label(codes[start])}, steps "
                   f"{int(hm.col_start[start])}-{int(hm.col_end[c - 1])}")
            out.append(
                f"<rect x='{x:.2f}' y='{y + 1}' width='{w:.2f}' height='{_CELL_H - 2}' "
                f"fill='{_color(codes[start])}'><title>{_e(tip)}</title></rect>"
            )
            start = c
    top = len(layers) * _CELL_H
    out.append(f"<text x='{_LABEL_W - 6}' y='{top + 15}' text-anchor='end' fill='#666'>step</text>")
    for step in axis_ticks(int(hm.col_start[0]), int(hm.col_end[-1]), _MAP_W // _TICK_PX):
        x = _step_x(hm, step, cell_w)
        out.append(
            f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{top}' y2='{top + 4}' stroke='#999'/>"
            f"<text class='tick' x='{x:.1f}' y='{top + 15}' text-anchor='middle' fill='#666'>{step}</text>"
        )
    out.append("</svg>")
    return "".join(out)


def _legend(codes: Iterable[int]) -> str:
    seen = sorted({int(c) for c in codes}, key=lambda c: -metadata.state_rank(c))
    items = [f"<span><i style='background:{_color(c)}'></i>{_e(_state_label(c))}</span>" for c in seen]
    return f"<div class='legend'>{''.join(items)}</div>"


def _cut(text, limit: int) -> str:
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]} [... {len(text) - limit} more characters]"


def _events_table(events: Sequence[Mapping], root: Mapping | None) -> str:
    if not events:
        return "<p class='meta'>No events.</p>"
    rows = []
    shown = list(events[:_MAX_EVENTS])
    shown += [e for e in events[_MAX_EVENTS:] if is_root_event(e, root)][:1]
    for e in shown:
        is_root = is_root_event(e, root)
        value = "" if e.get("value") is None else f"{e['value']:.3g}"
        rows.append(
            f"<tr{' class=root' if is_root else ''}><td class=num>{_e(e['step'])}</td>"
            f"<td class='{_e(e['severity'])}'>{_e(e['severity'])}</td>"
            f"<td><code class='name'>{_name_html(e['layer'])}</code></td><td>{_e(e['kind'])}</td>"
            f"<td>{_e(_cut(e['from_state'], _MAX_NAME))} &rarr; "
            f"{_e(_cut(e['to_state'], _MAX_NAME))}</td>"
            f"<td class=num>{_e(value)}</td><td>{_e(_cut(e['message'], _MAX_TEXT))}</td></tr>"
        )
    if len(events) > len(shown):
        rows.append(f"<tr><td colspan=7 class='meta'>... {len(events) - len(shown)} more events "
                    "(<code>neuraldbg report --json</code> lists every one)</td></tr>")
    head = ("<tr><th>step</th><th>severity</th><th>layer</th><th>kind</th>"
            "<th>transition</th><th>value</th><th>message</th></tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def _notes(title: str, notes: Sequence[str]) -> str:
    """A box listing what could not be read."""
    if not notes:
        return ""
    items = "".join(f"<li>{_e(n)}</li>" for n in list(notes)[:_MAX_NOTES])
    more = len(notes) - _MAX_NOTES
    tail = f"<li>... {more} more</li>" if more > 0 else ""
    return f"<div class='notes'><b>{_e(title)}</b><ul>{items}{tail}</ul></div>"


def _run_section(report: Mapping, run, max_cols: int, logdir: str | None) -> str:
    status = "failing" if report["status"] == "failing" else "healthy"
    root = report.get("root_cause")
    badge = f"<span class='badge {status}'>{status}</span>"
    if report.get("incomplete"):
        badge += " <span class='badge incomplete'>incomplete</span>"
    parts = [f"<section><h2>{_e(run_title(report['run'], logdir))} {badge}</h2>"]
    if root:
        parts.append(
            f"<div class='cause'><b>Root cause:</b> <code class='name'>{_name_html(root['layer'])}</code>: "
            f"{_e(root['kind'])} at step {_e(root['step'])}<br>{_e(root['message'])}</div>"
        )
    elif status == "failing":
        parts.append("<div class='cause'><b>Root cause:</b> not determined</div>")
    else:
        parts.append("<div class='ok'>No failure found.</div>")
    if report.get("incomplete"):
        parts.append(_notes("Incomplete: part of this run could not be read, so its diagnosis "
                            "may miss what that part held.", report.get("warnings") or []))
    elif report.get("warnings"):
        parts.append(_notes("Notes", report["warnings"]))
    if run is not None:
        root_layer = root["layer"] if root else None
        # the map's states come from the events' onsets, as the tab's do
        # (format/event_states.py; tests/test_html_report.py)
        steps = np.asarray(run.steps)
        last = int(steps[-1]) if steps.size else 0
        states = apply_spans(run.states, steps, steps, event_spans(report["events"], run.layer_names, last))
        parts.append(_state_map(run.layer_names, run.steps, states, root_layer, max_cols))
        parts.append(_legend(np.unique(states)))
        parts.append(f"<p class='meta'>{run.num_steps} stored steps, {run.num_layers} layers</p>")
    parts.append(_events_table(report["events"], root))
    parts.append("</section>")
    return "".join(parts)


def render_html(reports: Sequence[Mapping], runs: Sequence | None = None, *,
                title: str = "neuraldbg report", max_cols: int = 400,
                notes: Sequence[str] = (), logdir: str | None = None) -> str:
    """The HTML document for ``reports`` (``report.run_report`` dicts, with
    the ``contract.annotate`` keys when a run could not be read whole).

    ``runs`` (``reader.Run`` objects, same order) add each run's state map;
    without them only the diagnosis and events are shown. ``notes`` (what of
    the logdir was not read) are listed at the top. ``logdir``, the directory
    reported on, names a run TensorBoard calls "." (the logdir is the run) by
    the directory's name.
    """
    runs = list(runs) if runs is not None else [None] * len(reports)
    if len(runs) != len(reports):
        raise ValueError("runs and reports must have the same length")
    failing = sum(1 for r in reports if r["status"] == "failing")
    body = "".join(_run_section(rep, run, max_cols, logdir) for rep, run in zip(reports, runs))
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1><p class='meta'>{len(reports)} run{'s' if len(reports) != 1 else ''}, "
        f"{failing} failing "
        f"&middot; tb_neuraldbg {_e(__version__)}</p>{_notes('Not read', notes)}{body}"
        "</body></html>\n"
    )
