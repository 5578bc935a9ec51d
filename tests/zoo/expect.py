"""What the report must say for each fault of the zoo, and a one-line
summary of what it did say (tests/test_model_zoo.py, tests/zoo/probe.py)."""

from __future__ import annotations

from .faults import FAULTS

__all__ = ["LR_KINDS", "DEAD_KINDS", "expected", "judge", "names_the_rate", "said"]

#: what a learning rate x1000 does first, by model: the updates blow up the
#: weights (explosions, a loss spike, NaN) or kill the ReLUs; the root is the
#: rate whichever shows first (as tests/scenarios/failures.py lr_jump_*)
LR_KINDS = ("exploding_gradient", "activation_explosion", "loss_spike", "nonfinite", "dead_activation")
#: the ReLU after the zeroed layer is dead; the zeroed layer's output no
#: longer varies
DEAD_KINDS = ("dead_activation", "activation_collapse")
STATS_EVERY = 10  #: the writer's default: activation statistics are sampled on these steps


def expected(arch, fault: str, at: int) -> dict | None:
    """{"kinds", "layers", "steps"} the root cause must match; None for a
    healthy run (which must have none)."""
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}")
    if fault == "healthy":
        return None
    if fault == "lr":
        return {"kinds": LR_KINDS, "layers": ("<optimizer>",), "steps": (at,)}
    if fault == "nan":
        if arch.embedding is None:
            return {"kinds": ("data_anomaly",), "layers": ("<input>",), "steps": (at,)}
        return {"kinds": ("nonfinite",), "layers": arch.embedding, "steps": (at,)}
    # dead: the ReLU's zeros are counted on full steps only (act_dead_frac);
    # the zeroed layer's gradient, exactly 0, on every step
    next_full = -(-at // STATS_EVERY) * STATS_EVERY
    return {"kinds": DEAD_KINDS, "layers": arch.dead, "steps": tuple(range(at, next_full + 1))}


def judge(arch, fault: str, at: int, report: dict) -> bool:
    """Whether ``report`` is right about ``fault`` planted in ``arch``."""
    root = report["root_cause"]
    want = expected(arch, fault, at)
    if want is None:
        errors = [e for e in report["events"] if e["severity"] == "error"]
        return report["status"] == "healthy" and root is None and not errors
    return (root is not None and root["kind"] in want["kinds"] and root["layer"] in want["layers"]
            and root["step"] in want["steps"])


def names_the_rate(report: dict) -> bool:
    """Whether the root cause's message of a learning-rate fault says the
    learning rate and does not blame the weight decay (which the planted
    fault leaves alone)."""
    root = report["root_cause"]
    if root is None:
        return False
    message = root["message"].lower()
    return "learning rate" in message and "weight decay" not in message


def said(report: dict) -> str:
    """What the report said, in one line: status, root cause, the first
    warning or error events."""
    root = report["root_cause"]
    text = report["status"]
    if root is not None:
        text += f"; root {root['kind']} at {root['layer']} step {root['step']}"
    loud = [e for e in report["events"] if e["severity"] != "info"]
    if loud:
        shown = ", ".join(f"{e['severity']} {e['kind']} {e['layer']}@{e['step']}" for e in loud[:3])
        more = f" (+{len(loud) - 3} more)" if len(loud) > 3 else ""
        text += f"; events: {shown}{more}"
    return text
