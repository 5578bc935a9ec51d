"""Numbers as the diagnosis words them: three significant digits, changes
as "a -> b", unknown values as "n/a" (used by every message module)."""

from __future__ import annotations

import math

__all__ = ["fmt", "fmt_change", "known"]


def fmt(x) -> str:
    """A compact number: 3 significant digits, 'nan'/'inf' spelled out."""
    if x is None:
        return "n/a"
    x = float(x)
    if math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x != 0 and (abs(x) >= 1e4 or abs(x) < 1e-3):
        return f"{x:.2e}"
    return f"{x:.3g}"


def known(x) -> bool:
    """Whether ``x`` is a measured value (not None, not NaN)."""
    return x is not None and not (isinstance(x, float) and math.isnan(x)) and not (
        isinstance(x, (int, float)) and math.isnan(float(x)))


def fmt_change(before, value) -> str:
    """"a -> b", or "b" when the value before was not measured."""
    return f"{fmt(before)} -> {fmt(value)}" if known(before) else fmt(value)
