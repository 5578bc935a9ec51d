"""The Event record: one confirmed state transition of one layer."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["Event"]


def _json_float(x) -> float | None:
    """A float for JSON, or None when missing / not finite (JSON has no NaN)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class Event:
    """A transition of one layer from one state to another.

    ``step`` is the onset (the first step of the new state), not the step the
    transition was confirmed at. ``value`` is the evidence after the
    transition (e.g. the gradient norm), ``extra`` holds optional JSON-able
    keys such as ``value_before`` and ``confirmed_step``.
    """

    step: int
    layer: str
    kind: str
    from_state: str
    to_state: str
    value: float | None
    severity: str
    message: str
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict:
        """JSON-able dict: the DESIGN.md keys first, then the extras."""
        d = {
            "step": int(self.step),
            "layer": str(self.layer),
            "kind": str(self.kind),
            "from_state": str(self.from_state),
            "to_state": str(self.to_state),
            "value": _json_float(self.value),
            "severity": str(self.severity),
            "message": str(self.message),
        }
        for k, v in self.extra.items():
            if k not in d:
                d[k] = _json_float(v) if isinstance(v, float) else v
        return d
