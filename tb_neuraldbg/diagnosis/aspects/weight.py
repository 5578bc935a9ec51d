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

    A row cannot move when the optimizer does not hold its parameters
    (``opt_group`` -1) or its param group's learning rate is 0: known at
    every step from the writer's facts. Otherwise a row that did not move is
    seen at the steps that measure updates (an update ratio of exactly 0, or
    an unchanged weight norm). Either way it is frozen when it gets a healthy
    gradient. With an optimizer watched (a learning rate recorded) a step
    where no row moves at all is judged too: the optimizer itself did nothing
    to the model (it holds another model's parameters, the gradients were
    cleared before ``step()``); without one (``record()``), a step in which
    nothing moves may be a micro-batch of gradient accumulation, so only rows
    that stay still while others move are frozen.

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
        self.moved_anyway = np.zeros(0, bool)  # moved although the watched optimizer cannot move it
        self.high_update_steps = []  # (step, lr): most layers moved > update_ratio_high

    def grow(self, kinds: RowKinds) -> None:
        super().grow(kinds)
        n = kinds.n
        self.ur_seen = grow(self.ur_seen, n, False)
        self.last_w = grow(self.last_w, n, np.nan)
        self.last_w_step = grow(self.last_w_step, n, -10)
        self.moved_anyway = grow(self.moved_anyway, n, False)

    def classify(self, step: int, row, grad_raw, lr: float, skipped: bool) -> dict:
        """{"weight": (raw, None)}; ``grad_raw``: this step's raw gradient
        states; ``lr``: the learning rate of the first group (NaN: unknown,
        e.g. no optimizer watched); ``skipped``: the optimizer skipped this
        step (a GradScaler back-off)."""
        mod = self.kinds.is_mod
        ur = row[:, _M["update_ratio"]]
        w = row[:, _M["weight_norm"]]
        ur_ok = mod & np.isfinite(ur)
        self.ur_seen |= ur_ok
        # without an update ratio, an unchanged weight norm since the previous
        # step says the same (only for layers that never report the ratio)
        norm_ok = mod & ~self.ur_seen & np.isfinite(w) & (self.last_w_step == step - 1)
        # rows that cannot move at this step, from the writer's facts, unless
        # they were seen moving all the same (stepped by a second optimizer:
        # SparseAdam for an embedding beside Adam for the rest)
        cannot = mod & ((row[:, _M["opt_group"]] == -1) | (row[:, _M["lr"]] == 0))
        # (its weight norm changed between two measurements: the update
        # ratio sees only the watched optimizer's update)
        norm_moved = np.isfinite(w) & np.isfinite(self.last_w) & (w != self.last_w)
        self.moved_anyway |= cannot & norm_moved
        other = cannot & self.moved_anyway  # (judged by their weight norms alone)
        cannot &= ~other
        norm_still = np.isfinite(w) & np.isfinite(self.last_w) & (w == self.last_w)
        still = (ur_ok & (ur == 0) & ~other) | (norm_ok & (w == self.last_w)) | cannot | (other & norm_still)
        moved = (((ur_ok & (ur > 0)) | (norm_ok & (w != self.last_w))) & ~cannot) | (other & norm_moved)
        wf = mod & np.isfinite(w)
        self.last_w[wf] = w[wf]
        self.last_w_step[wf] = step
        raw = blank(self.kinds.n)
        out = {"weight": (raw, None)}
        if skipped:
            return out  # nothing may move at this step
        optimizer_known = not math.isnan(lr)
        if lr == 0 and not cannot.any():
            return out  # the rate of every group is 0 (an old log without the facts)
        if not moved.any() and not optimizer_known:
            return out  # e.g. a micro-batch of gradient accumulation
        raw[moved] = HEALTHY
        # frozen: a healthy gradient, and no update
        frozen = still & (grad_raw == HEALTHY) & (row[:, _M["grad_norm"]] > 0)
        raw[frozen] = STATE["frozen"]
        # learning-rate evidence for the root cause: most layers moved far
        if ur_ok.sum() >= 2:
            frac_high = float(np.mean(ur[ur_ok] > self.t.update_ratio_high))
            if frac_high >= 0.5:
                self.high_update_steps.append((step, float(lr)))
        return out

    def evidence(self, name, code, value, before):
        # a row that cannot move (not held, a rate of 0) has moved by exactly
        # 0 at steps that do not measure updates too
        frozen = (code == STATE["frozen"]) & np.isnan(value)
        return np.where(frozen, 0.0, value), before

    def event_fields(self, name, kind, tr, row):
        """Why the row does not move: the optimizer does not hold it, its
        group's rate is 0, or the update left it unchanged."""
        extra = {}
        if tr.to_code != HEALTHY:
            i = tr.index
            group, lr = row[i, _M["opt_group"]], row[i, _M["lr"]]
            if group == -1:
                extra["cause"] = "not_in_optimizer"
            elif lr == 0:
                extra["cause"] = "lr_zero"
                extra["group"] = int(group)
            else:
                extra["cause"] = "no_update"
                if np.isfinite(group):
                    extra["group"] = int(group)
        return tr.value, tr.value_before, extra
