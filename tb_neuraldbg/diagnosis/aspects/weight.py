"""The weight aspect: frozen weights (a gradient, but no update)."""

from __future__ import annotations

import math

import numpy as np

from ..thresholds import Thresholds
from ._base import HEALTHY, METRIC, STATE, Aspect, RowKinds, blank, grow

__all__ = ["Weight"]

_M = METRIC


class Weight(Aspect):
    """Whether each module's weights move (hysteresis aspect ``weight``).

    It also keeps, for the root cause, the steps where most layers moved by
    more than ``update_ratio_high`` of their norm (a learning rate too high).
    """

    EVIDENCE = {"weight": ("update_ratio", None)}

    def __init__(self, thresholds: Thresholds):
        super().__init__()
        self.t = thresholds
        self.ur_seen = np.zeros(0, bool)  # update_ratio ever measured
        self.last_w = np.zeros(0)  # last weight norm measured ...
        self.last_w_step = np.zeros(0, np.int64)  # ... and its step
        self.high_update_steps = []  # (step, lr): most layers moved > update_ratio_high

    def grow(self, kinds: RowKinds) -> None:
        super().grow(kinds)
        n = kinds.n
        self.ur_seen = grow(self.ur_seen, n, False)
        self.last_w = grow(self.last_w, n, np.nan)
        self.last_w_step = grow(self.last_w_step, n, -10)

    def classify(self, step: int, row, grad_raw, lr: float, skipped: bool) -> dict:
        """{"weight": (raw, None)}; ``grad_raw``: this step's raw gradient
        states; ``lr``: the learning rate (NaN: unknown); ``skipped``: the
        optimizer skipped this step (a GradScaler back-off)."""
        mod = self.kinds.is_mod
        ur = row[:, _M["update_ratio"]]
        w = row[:, _M["weight_norm"]]
        ur_ok = mod & np.isfinite(ur)
        self.ur_seen |= ur_ok
        # without an update ratio, an unchanged weight norm since the previous
        # step says the same (only for layers that never report the ratio)
        norm_ok = mod & ~self.ur_seen & np.isfinite(w) & (self.last_w_step == step - 1)
        still = (ur_ok & (ur == 0)) | (norm_ok & (w == self.last_w))
        moved = (ur_ok & (ur > 0)) | (norm_ok & (w != self.last_w))
        wf = mod & np.isfinite(w)
        self.last_w[wf] = w[wf]
        self.last_w_step[wf] = step
        raw = blank(self.kinds.n)
        out = {"weight": (raw, None)}
        if not (lr > 0 or math.isnan(lr)) or skipped:
            return out  # nothing may move at this step
        if int(moved.sum()) == 0:
            return out  # e.g. a skipped step: no layer moved
        raw[moved] = HEALTHY
        # frozen: has a healthy gradient but does not move while others do
        frozen = still & (grad_raw == HEALTHY) & (row[:, _M["grad_norm"]] > 0)
        raw[frozen] = STATE["frozen"]
        # learning-rate evidence for the root cause: most layers moved far
        if ur_ok.sum() >= 2:
            frac_high = float(np.mean(ur[ur_ok] > self.t.update_ratio_high))
            if frac_high >= 0.5:
                self.high_update_steps.append((step, float(lr)))
        return out
