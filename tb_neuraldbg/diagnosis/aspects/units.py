"""The units aspect: a layer whose output units are all (near) the same.

Units that equal each other are one unit: nothing after the layer can learn
more than one feature from it (a constant initialisation, weight rows made
equal, a broadcast where a per-unit value was meant). ``unit_spread`` is the
share of the output's spread that lies between the units of each position
(docs/FORMAT.md): near 1 in healthy layers, 0 when every unit is the same.
Layers with one unit, and outputs without spread (``act_std`` judges
those), have no ``unit_spread``.
"""

from __future__ import annotations

import numpy as np

from ..thresholds import Thresholds
from ._base import HEALTHY, METRIC, STATE, Aspect, blank

__all__ = ["Units", "UNITS_IDENTICAL"]

#: ``unit_spread`` at or below this: the units are the same. The healthy
#: scenarios' lowest is about 0.4 (a token-mixing Linear of an MLP-Mixer);
#: identical units leave only float32 rounding, about 1e-3 and below
#: (tests/test_gain_units.py, tests/scenarios).
UNITS_IDENTICAL = 0.02

_COL = METRIC["unit_spread"]


class Units(Aspect):
    """``units``: collapsed where a module's units are all the same, on
    full-statistics steps."""

    EVIDENCE = {"units": ("unit_spread", None)}

    def __init__(self, thresholds: Thresholds):
        super().__init__()
        self.t = thresholds
        self.row = None
        self.last = np.zeros(0)
        self.before = self.last

    def grow(self, kinds) -> None:
        super().grow(kinds)
        self.last = np.concatenate([self.last, np.full(kinds.n - len(self.last), np.nan)])

    def classify(self, row) -> dict:
        """{"units": (raw, None)}."""
        self.row = row
        v = row[:, _COL]
        raw = blank(self.kinds.n)
        if np.isnan(v).all():  # a cheap step (nine in ten): nothing measured
            return {"units": (raw, None)}
        measured = self.kinds.is_mod & np.isfinite(v)
        raw[measured] = HEALTHY
        raw[measured & (v <= UNITS_IDENTICAL)] = STATE["collapsed"]
        self.before, self.last = self.last, np.where(np.isnan(v), self.last, v)
        return {"units": (raw, None)}

    def evidence(self, name: str, code, value, before) -> tuple:
        """The unit spread, and its value at the row's previous measurement."""
        return (self.row[:, _COL] if self.row is not None else value), self.before

    def event_fields(self, name: str, kind: str, tr, row) -> tuple:
        """The unit spread as the event's value, said as such in the message."""
        return tr.value, tr.value_before, {"signal": "unit_spread", "cause": "identical_units"}
