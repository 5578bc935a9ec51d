"""The ``<optimizer>`` aspect: learning-rate bookkeeping, and the collapse of
a GradScaler's scale with where its inf/NaN come from."""

from __future__ import annotations

import math
from collections import deque
from typing import NamedTuple

import numpy as np

from ..thresholds import Thresholds
from ._base import HEALTHY, METRIC, STATE, UNMEASURED, Aspect, blank

__all__ = ["Optimizer", "Rate"]

_M = METRIC


class Rate(NamedTuple):
    """What the optimizer did at one step, for the other aspects."""

    lr: float  # learning rate of the first group (NaN: unknown)
    skipped: bool  # a GradScaler back-off skipped the step
    scaler_active: bool  # a GradScaler is in use


class Optimizer(Aspect):
    """The <optimizer> row (hysteresis aspect ``scaler``).

    The scale is recorded before ``scaler.update()``: a decrease seen at a
    step means the previous step found inf/NaN and was skipped. It also keeps,
    for the root cause, the learning-rate jumps and the recent rates.
    """

    EVIDENCE = {"scaler": ("scale", None)}

    def __init__(self, thresholds: Thresholds):
        super().__init__()
        self.t = thresholds
        self.lr_prev = math.nan
        self.lr_jumps = []  # (step, lr_before, lr_after)
        self.lr_hist = deque(maxlen=4)  # the last learning rates
        # (step, lr) of the last steps: a schedule that keeps raising the rate
        # (no single jump) over ``lr_window`` steps before a failure
        self.lr_steps = deque(maxlen=4 * max(1, thresholds.lr_window))
        self.scale_prev = math.nan
        self.scale_max = 0.0
        self.scale_code = UNMEASURED  # this step's raw scaler state
        self.dec_run = 0  # back-offs in a row
        self.dec_start = -1  # the step skipped first in that run
        self.dec_origin = None  # (kind "forward"/"backward", row) of a back-off run
        self.last_origin = None  # where the last non-finite values appeared
        self.prev_step = -1

    def observe(self, step: int, row) -> Rate:
        """Read this step's learning rate and scale (before the other aspects)."""
        rate = self._observe(step, row)
        self.prev_step = step
        return rate

    def _observe(self, step, row) -> Rate:
        t, i = self.t, self.kinds.opt_index
        self.scale_code = UNMEASURED
        if i < 0:
            return Rate(math.nan, False, False)
        lr = float(row[i, _M["value"]])
        scale = float(row[i, _M["scale"]])
        if np.isfinite(lr):
            # a jump is a discontinuity in a schedule that was varying slowly
            # (the first steps of a warmup from ~0 multiply the rate by large
            # factors on purpose)
            hist = self.lr_hist
            steady = len(hist) == hist.maxlen and all(
                0.5 * b <= a <= 2.0 * b for a, b in zip(list(hist)[1:], hist))
            if steady and self.lr_prev > 0 and lr >= t.lr_jump_factor * self.lr_prev:
                self.lr_jumps.append((step, self.lr_prev, lr))
            hist.append(lr)
            self.lr_steps.append((int(step), lr))
            self.lr_prev = lr
        if not np.isfinite(scale):
            return Rate(lr, False, False)
        prev = self.scale_prev
        self.scale_prev = scale
        self.scale_max = max(self.scale_max, scale)
        if math.isnan(prev):
            self.scale_code = HEALTHY
            return Rate(lr, False, True)
        skipped = False
        if scale < prev:
            skipped = True
            if self.dec_run == 0:
                self.dec_start = self.prev_step
                self.dec_origin = self.last_origin
            self.dec_run += 1
        elif scale > prev:
            self.dec_run = 0
        collapsed = self.dec_run >= t.scaler_backoffs or (
            self.dec_run > 0 and scale <= self.scale_max * 2.0 ** -t.scaler_backoffs)
        if scale == prev and self.dec_run >= t.scaler_backoffs:
            collapsed = True  # stuck at the bottom (e.g. underflowed to 0)
        elif scale == prev:
            self.dec_run = 0
        self.scale_code = STATE["scaler_collapse"] if collapsed else HEALTHY
        return Rate(lr, skipped, True)

    def classify(self) -> dict:
        """{"scaler": (raw, onset | None)}: this step's scaler state (after ``observe``)."""
        raw = blank(self.kinds.n)
        i = self.kinds.opt_index
        if i < 0 or self.scale_code == UNMEASURED:
            return {"scaler": (raw, None)}
        raw[i] = self.scale_code
        onset = np.full(self.kinds.n, -1, np.int64)
        onset[i] = self.dec_start
        return {"scaler": (raw, onset)}

    def note_origin(self, origin, skipped: bool) -> None:
        """Where this step's inf/NaN first appear, (side "forward"/"backward",
        row) or None: the origin of the back-offs that follow."""
        self.last_origin = origin
        if skipped and self.dec_origin is None:
            self.dec_origin = origin

    def event_fields(self, name, kind, tr, row):
        extra = {}
        if tr.to_code != HEALTHY and self.dec_origin is not None:
            side, idx = self.dec_origin
            extra["origin"] = self.kinds.names[idx]
            extra["origin_side"] = side
        return tr.value, tr.value_before, extra
