"""The states a run's events give its cells (docs/API.md, *states from events*).

A transition is confirmed ``persist`` measured steps after its onset
(``diagnosis/transitions.py``), and the row written at each step holds the
states confirmed by then: from the rows alone, the map turns at the
confirmation (step 29 for a layer born vanishing) while the event says "from
step 0". The event is the decision; the cells of [onset, confirmation) take
its state from it, and so do the cells of a state only an event carries (a
root cause outside the layers, a plateau decided at the end of the run).
Pure numpy over event dicts; the plugin applies it to the heatmap and layer
routes. tests/test_cell_states.py decides.
"""

from __future__ import annotations

import numpy as np

from . import metadata

__all__ = ["apply_spans", "event_spans"]

_RANK = np.full(256, -1, np.int16)
for _s in metadata.STATE_TABLE:
    _RANK[_s.code] = metadata.state_rank(_s.code)
_HEALTHY_RANK = int(_RANK[metadata.STATE_CODE["healthy"]])


def event_spans(events, names, last_step: int) -> list[tuple[int, int, int, int]]:
    """(row, state code, first step, last step) over which each failing event's
    state holds: from its onset to the step before the first later event of
    its layer that leaves that state (a recovery, an escalation), else to
    ``last_step``. ``events`` are event dicts (contract keys ``step``,
    ``layer``, ``from_state``, ``to_state``); ``names`` the rows' layer names.
    Events of unknown layers or states, and info events, are left out."""
    row_of = {n: i for i, n in enumerate(names)}
    open_: dict = {}  # (row, state name) -> onset
    spans = []
    for e in sorted(events, key=lambda e: e.get("step", 0)):
        row, step = row_of.get(e.get("layer")), e.get("step")
        if row is None or not isinstance(step, int):
            continue
        start = open_.pop((row, e.get("from_state")), None)
        if start is not None and step > start:
            spans.append((row, metadata.STATE_CODE[e["from_state"]], start, step - 1))
        to = e.get("to_state")
        code = metadata.STATE_CODE.get(to)
        if code is not None and _RANK[code] > _HEALTHY_RANK and e.get("severity") != "info":
            open_.setdefault((row, to), step)
    for (row, state), start in open_.items():
        if start <= last_step:
            spans.append((row, metadata.STATE_CODE[state], start, last_step))
    return spans


def apply_spans(states: np.ndarray, first: np.ndarray, last: np.ndarray, spans) -> np.ndarray:
    """``states`` uint8 [K, L] (cell k covers steps [first[k], last[k]]) with
    each span's state where it is worse than the cell's, up to the first cell
    that already holds it (the rows hold a state from its confirmation on):
    a copy when any changes, else ``states`` itself."""
    out = states
    for row, code, start, end in spans:
        if row >= states.shape[1]:
            continue
        lo = int(np.searchsorted(last, start, side="left"))
        hi = int(np.searchsorted(first, end, side="right"))
        held = np.flatnonzero(states[lo:hi, row] == code)
        if held.size:
            hi = lo + int(held[0])
        if lo >= hi:
            continue
        cells = out[lo:hi, row]
        worse = _RANK[cells] < _RANK[code]
        if worse.any():
            if out is states:
                out = states.copy()
            out[lo:hi, row] = np.where(worse, np.uint8(code), cells)
    return out
