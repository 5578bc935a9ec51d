"""A run's writer sessions: what a resume hides, and whether the run was closed.

Every DebugWriter that watches a model writes a start record
(``metadata.TAG_SESSION_START``) and, when it closes cleanly, an end record
(``metadata.TAG_SESSION_END``) with the same ``"session"`` id. Records are
ordered by their wall times (every event carries one), which is all a data
provider passes on of the order they were written in. From those:

- **purges**: a start record with a ``purge_step`` N (``DebugWriter(logdir,
  purge_step=N)``, a run resumed from a checkpoint) hides every record
  written before it (an earlier wall time) at step N or later, as TensorBoard
  hides such scalars: the run reads as one, its steps continuous.
- **complete**: whether the last session (the latest start) has its end:
  False for a run whose writer never closed (SIGKILL, a power loss, or one
  still writing), None for a run written before sessions were recorded.
- **diagnosis**: each session's own last diagnosis, combined (a resumed
  writer starts its diagnosis afresh: a failure before the resume still
  makes the run failing, and the earliest root cause wins).

Pure numpy; the offline reader and the plugin both read sessions here
(tests/test_resume.py decides, through both). Everything is untrusted: a
record that does not fit is skipped with a note.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from . import metadata
from .decode import JsonRecords, Note, last_diagnosis

__all__ = ["Session", "Sessions", "TAGS", "read_sessions", "kept", "combined_diagnosis"]

#: The tags of this module: a run holding only these has no data yet.
TAGS = frozenset({metadata.TAG_SESSION_START, metadata.TAG_SESSION_END})
# Longest session id believed (the writer's are 32 hex digits).
_MAX_ID = 200
_STEP_LIMIT = 2**63


class Session(NamedTuple):
    """One writer's start: its id, the step and wall time of its record, and
    the step from which it hides earlier records (None: it hides nothing)."""

    id: str
    step: int
    wall: float
    purge_step: int | None


class Sessions(NamedTuple):
    """``starts`` in wall-time order; ``purges`` (step, wall time) of those
    with a purge step; ``complete`` (see the module docstring); ``signal``:
    the signal the last session's writer said ended it (``"SIGTERM"``), or None."""

    starts: tuple
    purges: tuple
    complete: bool | None
    signal: str | None = None


NONE = Sessions((), (), None, None)


def _step(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= _STEP_LIMIT:
        return None
    return value


def _id(payload: Any) -> str | None:
    sid = payload.get("session") if isinstance(payload, dict) else None
    return sid if isinstance(sid, str) and 0 < len(sid) <= _MAX_ID else None


def _timed(records: JsonRecords | None) -> list:
    """(step, wall, value) of ``records`` (wall NaN where none was kept)."""
    if records is None:
        return []
    walls = records.walls if records.walls is not None else np.full(len(records.values), np.nan)
    return list(zip(records.steps.tolist(), walls.tolist(), records.values))


def read_sessions(starts: JsonRecords | None, ends: JsonRecords | None, note: Note) -> Sessions:
    """The sessions of a run from its start and end records (both read with
    their wall times, ``decode.decode_json(..., walls=...)``)."""
    found = []
    for step, wall, payload in _timed(starts):
        sid = _id(payload)
        purge = payload.get("purge_step") if isinstance(payload, dict) else None
        if sid is None or (purge is not None and _step(purge) is None):
            note(f"skipped a session start at step {step}: not a writer's start record")
            continue
        found.append(Session(sid, int(step), float(wall), purge))
    if not found:
        return NONE
    found.sort(key=lambda s: s.wall)  # (stable: records of one time keep their order)
    last = found[-1]
    complete, signal = False, None
    for _, wall, payload in _timed(ends):
        if _id(payload) == last.id and not wall < last.wall:
            complete = True
            sig = payload.get("signal")
            signal = sig[:40] if isinstance(sig, str) else None
    purges = tuple((s.purge_step, s.wall) for s in found if s.purge_step is not None)
    return Sessions(tuple(found), purges, complete, signal)


def kept(steps, walls, purges) -> np.ndarray | None:
    """Which records survive the purges (bool [n]), or None when all do.

    A record at step ``s`` written at wall time ``w`` is hidden by a purge
    (N, W) when ``s >= N`` and ``w < W``: written before the resume, at or
    after the step it resumed from."""
    if not purges:
        return None
    steps = np.asarray(steps, dtype=np.int64)
    walls = np.asarray(walls, dtype=np.float64)
    keep = np.ones(steps.shape[0], dtype=bool)
    for step, wall in purges:
        keep &= ~((steps >= step) & (walls < wall))
    return None if bool(keep.all()) else keep


def _rc_step(diagnosis: dict) -> float:
    rc = diagnosis.get("root_cause")
    step = _step(rc.get("step")) if isinstance(rc, dict) else None
    return float("inf") if step is None else float(step)


def combined_diagnosis(records: JsonRecords, sessions: Sessions, note: Note | None = None) -> dict | None:
    """The run's diagnosis: with one session (or records without wall
    times), the last one written (``decode.last_diagnosis``); with several,
    each session's last diagnosis combined: failing when one of them is,
    with the earliest root cause among those failing."""
    pairs = records.pairs()
    if len(sessions.starts) < 2 or records.walls is None:
        return last_diagnosis(pairs, note)
    bounds = np.asarray([s.wall for s in sessions.starts], dtype=np.float64)
    # The session a record was written in: the latest start at or before it
    # (-1: before every start, an older writer's).
    where = np.searchsorted(bounds, records.walls, side="right") - 1
    last: dict = {}
    for i, (step, payload) in enumerate(pairs):
        if isinstance(payload, dict):
            last[int(where[i])] = payload
        elif note is not None:
            note(f"skipped a diagnosis at step {step}: not an object")
    if not last:
        return None
    newest = last[max(last)]
    failing = [d for d in last.values() if d.get("status") == "failing"]
    if not failing:
        return newest
    return min(failing, key=_rc_step)
