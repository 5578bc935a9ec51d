"""The report contract: DESIGN.md's report JSON, and nothing but it.

``run_report`` reduces whatever a logdir holds (a stored or recomputed
diagnosis, event dicts with optional extra keys) to exactly the public
contract of shared/DESIGN.md; ``logdir_report`` wraps runs into the
``neuraldbg report --json`` object. The reader, the plugin, the text and HTML
reports all import it from here.

Everything read from a logdir is untrusted: values are coerced to the
contract's types and records that cannot be are skipped with a
``NeuralDbgDataWarning``; nothing here raises on bad data.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Iterable, Mapping

from . import metadata

__all__ = [
    "EVENT_KEYS",
    "ROOT_CAUSE_KEYS",
    "STATUSES",
    "NeuralDbgDataWarning",
    "run_report",
    "annotate",
    "logdir_report",
    "is_root_event",
    "unclosed_note",
]

# Key order of the contract; the JSON keeps it so diffs of reports stay readable.
EVENT_KEYS = ("step", "layer", "kind", "from_state", "to_state", "value", "severity", "message")
ROOT_CAUSE_KEYS = ("kind", "layer", "step", "message")
STATUSES = ("healthy", "failing")
# Steps are int64 on disk; a larger JSON integer is not a step (and its
# decimal text, past 4,300 digits, cannot even be printed).
_STEP_LIMIT = 2**63


class NeuralDbgDataWarning(UserWarning):
    """A record in a logdir could not be read and was skipped."""


# ---------------------------------------------------------------------------
# JSON: coercion to the contract


def _describe(value: Any, limit: int = 60) -> str:
    """A short description of an untrusted JSON value for a message: its
    type, and its text when that is a short scalar. Never recurses (a
    1,000-deep list has no ``repr`` worth printing, and asking for one can
    raise RecursionError)."""
    if isinstance(value, (list, dict)):
        return f"a JSON {'array' if isinstance(value, list) else 'object'}"
    if isinstance(value, str):
        text = repr(value[:limit])
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _STEP_LIMIT:
        text = "an integer beyond int64"  # and str() of a 5,000-digit int raises
    elif isinstance(value, (int, float, bool)) or value is None:
        text = repr(value)
    else:
        text = type(value).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _as_int(value: Any) -> int:
    """A step: an integer within int64, as TensorBoard stores steps."""
    # bool is an int subclass but never a valid step.
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {_describe(value)}")
    if isinstance(value, float) and value.is_integer() and abs(value) < _STEP_LIMIT:
        value = int(value)
    if isinstance(value, int) and abs(value) < _STEP_LIMIT:
        return value
    raise ValueError(f"expected an integer within int64, got {_describe(value)}")


def _as_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return value


def _as_float_or_none(value: Any) -> float | None:
    """Finite float, or None (JSON has no NaN/Infinity; the message keeps the story)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    # Non-numbers: None rather than a rejected event. A string "NaN" (as
    # TensorBoard's Respond encodes it) means the same.
    return None


def _as_choice(value: Any, choices: Iterable[str], what: str) -> str:
    value = _as_str(value)
    if value not in choices:
        raise ValueError(f"unknown {what} {_describe(value)}")
    return value


def _contract_event(event: Mapping) -> dict:
    """One event dict with exactly the contract keys, in contract order."""
    if not isinstance(event, Mapping):
        raise ValueError(f"an event must be an object, got {type(event).__name__}")
    missing = [k for k in EVENT_KEYS if k not in event and k != "value"]
    if missing:
        raise ValueError(f"event lacks {', '.join(missing)}")
    return {
        "step": _as_int(event["step"]),
        "layer": _as_str(event["layer"]),
        "kind": _as_choice(event["kind"], metadata.KINDS, "kind"),
        "from_state": _as_str(event["from_state"]),
        "to_state": _as_str(event["to_state"]),
        "value": _as_float_or_none(event.get("value")),
        "severity": _as_choice(event["severity"], metadata.SEVERITIES, "severity"),
        "message": _as_str(event["message"]),
    }


def _contract_root_cause(root_cause: Any) -> dict | None:
    if root_cause is None:
        return None
    if not isinstance(root_cause, Mapping):
        raise ValueError(f"root_cause must be an object or null, got {type(root_cause).__name__}")
    return {
        "kind": _as_choice(root_cause.get("kind"), metadata.KINDS, "kind"),
        "layer": _as_str(root_cause.get("layer")),
        "step": _as_int(root_cause.get("step")),
        "message": _as_str(root_cause.get("message")),
    }


def _warn(run: str, what: str, error: Exception, note: Callable[[str], None] | None) -> None:
    message = f"skipped {what}: {error}"
    if note is not None:
        note(message)
    else:
        warnings.warn(f"run {run[:200]!r}: {message}", NeuralDbgDataWarning, stacklevel=3)


def run_report(run: str, diagnosis: Mapping | None, events: Iterable[Mapping],
               note: Callable[[str], None] | None = None) -> dict:
    """One run of DESIGN.md's report JSON, with exactly the contract keys.

    ``diagnosis`` is ``{"status", "root_cause"}`` (as stored under
    ``neuraldbg/diagnosis`` or computed by the engine) or None. Without a
    usable diagnosis the status is "failing" iff a warning or error event
    exists and the root cause is null. A stored status is kept as the engine
    decided it: a root cause with a "healthy" status is a run with warnings
    only (DESIGN.md, *Severity and status*). ``events`` are event dicts that may carry extra keys;
    the result keeps the contract keys only, sorted by onset step (a stable
    sort: events of one step keep the order they were given in). Non-finite
    values become null. Events or a diagnosis that do not fit the contract are
    skipped with a ``NeuralDbgDataWarning`` (or, given ``note``, a message to
    it: the reader and the plugin collect them per run); nothing here raises
    on bad data.
    """
    run = str(run)
    clean_events = []
    for event in events:
        try:
            clean_events.append(_contract_event(event))
        except (ValueError, TypeError) as e:
            _warn(run, "an event", e, note)
    clean_events.sort(key=lambda e: e["step"])

    status = None
    root_cause = None
    if diagnosis is not None:
        try:
            if not isinstance(diagnosis, Mapping):
                raise ValueError(f"expected an object, got {type(diagnosis).__name__}")
            status = _as_choice(diagnosis.get("status"), STATUSES, "status")
            root_cause = _contract_root_cause(diagnosis.get("root_cause"))
        except (ValueError, TypeError) as e:
            _warn(run, "the diagnosis", e, note)
            status, root_cause = None, None
    if status is None:
        failing = any(e["severity"] in ("warning", "error") for e in clean_events)
        status = "failing" if failing else "healthy"
    return {"run": run, "status": status, "root_cause": root_cause, "events": clean_events}


def annotate(report: dict, warnings: Iterable[str] = (), incomplete: bool = False,
             complete: bool | None = None, last_step: int | None = None) -> dict:
    """``report`` (a ``run_report`` dict) with the extension keys that say
    what of the run could not be read: ``"incomplete": true`` when data was
    lost (its diagnosis may miss what that data held); ``"complete": false``
    and ``"last_step"`` (its last logged step, null for none) when the run's
    writer did not close it (killed, or still writing), which is also
    incomplete; and ``"warnings"``, one line each. Added only when there is
    something to say, so a clean run is exactly the contract."""
    warnings = [str(w) for w in warnings]
    if incomplete or complete is False:
        report["incomplete"] = True
    if complete is False:
        report["complete"] = False
        report["last_step"] = None if last_step is None else _as_int(last_step)
    if warnings:
        report["warnings"] = warnings
    return report


def unclosed_note(last_step: int | None) -> str:
    """The one line said of a run whose writer did not close it."""
    where = f"the data ends at step {last_step}" if last_step is not None else "no step was written"
    return f"the writer did not close this run (its process was killed, or it is still writing): {where}"


def logdir_report(runs: Iterable[Mapping], notes: Iterable[str] = ()) -> dict:
    """The whole ``--json`` object: ``{"runs": [run_report(...), ...]}``, and
    ``"notes"`` (one line each: runs, files and directories not read) when
    there are any."""
    out = {"runs": list(runs)}
    notes = [str(n) for n in notes]
    if notes:
        out["notes"] = notes
    return out


def is_root_event(event: Mapping, root: Mapping | None) -> bool:
    """Whether ``event`` is the one the root cause names (same step, layer, kind)."""
    return bool(root) and all(event.get(k) == root.get(k) for k in ("step", "layer", "kind"))
