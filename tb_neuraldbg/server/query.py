"""Query strings of the plugin's routes, parsed: bad input raises
``tensorboard.errors.InvalidArgumentError`` (TensorBoard answers 400 with the
message). Nothing from the request is echoed at length."""

from __future__ import annotations

from tensorboard import errors

__all__ = ["MAX_STEP", "int_arg", "required", "step_range", "choices"]

MAX_STEP = 2**62  # beyond any real step, far from int64 overflow


def int_arg(args, name: str, default: int | None, lo: int, hi: int) -> int | None:
    """Integer ``name`` in [lo, hi] (decimal), ``default`` when absent or empty."""
    raw = args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw, 10)
    except ValueError:  # also a 5,000-digit number (int's own limit)
        raise errors.InvalidArgumentError(f"{name} must be an integer, got {raw[:40]!r}")
    if not lo <= value <= hi:
        raise errors.InvalidArgumentError(f"{name} must be in [{lo}, {hi}], got {value}")
    return value


def required(args, name: str) -> str:
    """A parameter that must be given and not empty."""
    value = args.get(name)
    if not value:
        raise errors.InvalidArgumentError(f"missing required parameter {name!r}")
    return value


def step_range(args) -> tuple[int, int]:
    """(start, end) inclusive, 0 <= start <= end (defaults: every step)."""
    start = int_arg(args, "start", 0, 0, MAX_STEP)
    end = int_arg(args, "end", MAX_STEP, 0, MAX_STEP)
    if start > end:
        raise errors.InvalidArgumentError(f"start ({start}) must be <= end ({end})")
    return start, end


def choices(args, name: str, allowed) -> list[str]:
    """Every value of a repeatable parameter, each one of ``allowed``."""
    values = args.getlist(name)
    for v in values:
        if v not in allowed:
            raise errors.InvalidArgumentError(
                f"unknown {name} {v[:60]!r}; expected one of: {', '.join(allowed)}"
            )
    return values
