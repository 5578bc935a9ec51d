"""The weight aspect: frozen weights (a gradient, but no update)."""

from __future__ import annotations

import math

import numpy as np

from ..thresholds import Thresholds
from ._base import HEALTHY, METRIC, STATE, Aspect, RowKinds, blank, for_good, grow
from .rounding import Rounding

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

    EVIDENCE = {"weight": ("update_ratio", None), "moves": ("update_ratio", None),
                "rounded": ("update_lost_frac", None)}

    def __init__(self, thresholds: Thresholds):
        super().__init__()
        self.t = thresholds
        self.ur_seen = np.zeros(0, bool)  # update_ratio ever measured
        self.last_w = np.zeros(0)  # last weight norm measured ...
        self.last_w_step = np.zeros(0, np.int64)  # ... and its step
        self.moved_anyway = np.zeros(0, bool)  # moved although the watched optimizer cannot move it
        self.lr_was_up = np.zeros(0, bool)  # the row's group had a rate above 0 at an earlier step
        self.high_update_steps = []  # (step, lr): most layers moved > update_ratio_high
        # rows whose gradients (against their weights) or activations were
        # extreme at the first step, before any update (None: not seen yet)
        self.extreme_first = None
        self.moves = Moves(thresholds)
        self.rounding = Rounding()  # updates the weights' precision rounds away (aspects/rounding.py)

    def grow(self, kinds: RowKinds) -> None:
        super().grow(kinds)
        n = kinds.n
        self.ur_seen = grow(self.ur_seen, n, False)
        self.last_w = grow(self.last_w, n, np.nan)
        self.last_w_step = grow(self.last_w_step, n, -10)
        self.moved_anyway = grow(self.moved_anyway, n, False)
        self.lr_was_up = grow(self.lr_was_up, n, False)

    def classify(self, step: int, row, grad_raw, lr: float, skipped: bool) -> dict:
        """{"weight": (raw, None)}; ``grad_raw``: this step's raw gradient
        states; ``lr``: the learning rate of the first group (NaN: unknown,
        e.g. no optimizer watched); ``skipped``: the optimizer skipped this
        step (a GradScaler back-off)."""
        mod = self.kinds.is_mod
        ur = row[:, _M["update_ratio"]]
        w = row[:, _M["weight_norm"]]
        if self.extreme_first is None:
            self._first_step(row)
        ur_ok = mod & np.isfinite(ur)
        self.ur_seen |= ur_ok
        # without an update ratio, an unchanged weight norm since the previous
        # step says the same (only for layers that never report the ratio)
        norm_ok = mod & ~self.ur_seen & np.isfinite(w) & (self.last_w_step == step - 1)
        # rows that cannot move at this step, from the writer's facts, unless
        # they were seen moving all the same (stepped by a second optimizer:
        # SparseAdam for an embedding beside Adam for the rest)
        cannot = mod & ((row[:, _M["opt_group"]] == -1) | (row[:, _M["lr"]] == 0))
        # A rate a schedule took to exactly 0 after the group trained is the
        # schedule's, judged on <optimizer> by how long it lasts (``Moves``: a
        # decay to 0 at the run's end is none, a total of one epoch is); a
        # group at 0 from its first step is its layers' (tests/test_diagnosis_moves.py).
        held = mod & (row[:, _M["opt_group"]] != -1)
        zeroed = held & (row[:, _M["lr"]] == 0) & self.lr_was_up
        self.lr_was_up |= held & (row[:, _M["lr"]] > 0)
        # (its weight norm changed between two measurements: the update
        # ratio sees only the watched optimizer's update)
        norm_moved = np.isfinite(w) & np.isfinite(self.last_w) & (w != self.last_w)
        self.moved_anyway |= cannot & norm_moved
        other = cannot & self.moved_anyway  # (judged by their weight norms alone)
        cannot &= ~other
        norm_still = np.isfinite(w) & np.isfinite(self.last_w) & (w == self.last_w)
        # (an update under update_negligible of the weights at a rate under
        # lr_negligible is none: a group at 1e-9, a factor passed as its
        # rate; at an ordinary rate a tiny update is the gradient's, e.g. a
        # BatchNorm's first steps under OneCycleLR: resnet_onecycle_groups)
        tiny = (ur_ok & (ur > 0) & (ur < self.t.update_negligible) & ~other
                & (row[:, _M["lr"]] <= self.t.lr_negligible))
        still = (ur_ok & (ur == 0) & ~other) | (norm_ok & (w == self.last_w)) | cannot | (other & norm_still) | tiny
        moved = (((ur_ok & (ur > 0)) | (norm_ok & (w != self.last_w))) & ~cannot & ~tiny) | (other & norm_moved)
        wf = mod & np.isfinite(w)
        self.last_w[wf] = w[wf]
        self.last_w_step[wf] = step
        raw = blank(self.kinds.n)
        out = {"weight": (raw, None), "moves": self.moves.classify(step, row, self.kinds, mod & ~cannot, lr, zeroed),
               "rounded": self.rounding.classify(row, self.kinds, skipped)}
        if skipped:
            return out  # nothing may move at this step
        optimizer_known = not math.isnan(lr)
        if lr == 0 and not cannot.any():
            return out  # the rate of every group is 0 (an old log without the facts)
        if not moved.any() and not optimizer_known:
            return out  # e.g. a micro-batch of gradient accumulation
        raw[moved] = HEALTHY
        # frozen: a healthy gradient, and no update
        frozen = still & ~zeroed & (grad_raw == HEALTHY) & (row[:, _M["grad_norm"]] > 0)
        raw[frozen] = STATE["frozen"]
        # learning-rate evidence for the root cause: most layers moved far
        if ur_ok.sum() >= 2:
            frac_high = float(np.mean(ur[ur_ok] > self.t.update_ratio_high))
            if frac_high >= 0.5:
                self.high_update_steps.append((step, float(lr)))
        return out

    def _first_step(self, row) -> None:
        """Note the rows that were extreme before any update, at the first
        step that measured gradients against weights."""
        mod = self.kinds.is_mod
        g, w = row[:, _M["grad_norm"]], row[:, _M["weight_norm"]]
        seen = mod & np.isfinite(g) & np.isfinite(w) & (w > 0)
        if not seen.any():
            return
        t = self.t
        std = row[:, _M["act_std"]]
        # The weight norm is measured after this step's update: an update
        # larger than the weights (update ratio ur > 2) dominates it, and the
        # weights the gradient was taken on had a norm of at most w/(ur-1)
        # (the triangle inequality; tests/test_diagnosis_before_updates.py)
        ur = row[:, _M["update_ratio"]]
        w = np.where(np.isfinite(ur) & (ur > 2.0), w / np.maximum(ur - 1.0, 1.0), w)
        with np.errstate(invalid="ignore", divide="ignore"):
            extreme = seen & (g > t.grad_weight_extreme * w)
            extreme |= mod & np.isfinite(std) & (std > t.act_explode_floor)
        self.extreme_first = tuple(int(i) for i in np.flatnonzero(extreme))

    def evidence(self, name, code, value, before):
        if name == "moves":
            return self.moves.evidence(code, value, before)
        if name == "rounded":
            return self.rounding.evidence(code, value, before)
        # a row that cannot move (not held, a rate of 0) has moved by exactly
        # 0 at steps that do not measure updates too
        frozen = (code == STATE["frozen"]) & np.isnan(value)
        return np.where(frozen, 0.0, value), before

    def event_fields(self, name, kind, tr, row):
        """Why the row does not move: the optimizer does not hold it, its
        group's rate is 0, or the update left it unchanged."""
        if name == "moves":
            return self.moves.event_fields(tr)
        if name == "rounded":
            return self.rounding.event_fields(tr)
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
                ur = row[i, _M["update_ratio"]]
                tiny = 0 < ur < self.t.update_negligible and lr <= self.t.lr_negligible
                extra["cause"] = "update_negligible" if tiny else "no_update"
                if np.isfinite(group):
                    extra["group"] = int(group)
                if np.isfinite(lr):
                    extra["lr"] = float(lr)
        return tr.value, tr.value_before, extra


class Moves:
    """Whether the optimizer still moves the model (hysteresis aspect
    ``moves``, on the <optimizer> row): the model's median update ratio
    against its healthy size and against its own peak in the run, while
    gradients flow (see ``Thresholds.update_negligible``).

    Update ratios are measured every ``update_every`` steps; the rate is
    known at every step, and an update scales with it (SGD's and Adam's
    alike), so between two measurements each row's update is its last one
    times the change of its group's rate since (judged at the steps that
    measure weights). A collapse is a failure once it lasted ``lr_window``
    steps, and as long as the run trained before it:
    a schedule that anneals the rate to 0 at the end of a run is not one.
    """

    def __init__(self, thresholds: Thresholds):
        self.t = thresholds
        self.ur_last = np.zeros(0)  # last measured update ratio of each row ...
        self.lr_at = np.zeros(0)  # ... and its group's rate then
        self.first = None  # the first step judged
        self.since = None  # the first step of the current collapse
        self.peak = None  # (step, update ratio, grad norm) of the largest median update
        self.now = None  # (step, update ratio, grad norm) of the last step
        self.lr_peak = None  # (step, lr): the highest rate seen
        self.lr_now = None  # (step, lowest and highest rate of the groups)
        self.reason = None  # "negligible" or "collapse"

    def classify(self, step, row, kinds, movable, lr, zeroed):
        """(raw [L], onset [L] | None): frozen or healthy on <optimizer>,
        unmeasured elsewhere; ``movable``: the module rows the optimizer can
        move at this step; ``lr``: the first group's rate; ``zeroed``: the
        rows whose group's rate fell to 0 after it was above (they moved by
        0: judged here, as a collapse of the update)."""
        n = kinds.n
        raw = blank(n)
        if len(self.ur_last) < n:
            self.ur_last, self.lr_at = grow(self.ur_last, n, np.nan), grow(self.lr_at, n, np.nan)
        # judged at the steps that measure weights (full steps): a collapse
        # lasts lr_window steps or more, and the worker runs this every step
        if not np.isfinite(row[:, _M["weight_norm"]]).any():
            return raw, None
        self._rates(step, row, kinds, lr)
        i = kinds.opt_index
        ur, g = row[:, _M["update_ratio"]], row[:, _M["grad_norm"]]
        rate = row[:, _M["lr"]]
        rate = np.where(np.isfinite(rate), rate, lr)
        movable = movable | zeroed
        seen = movable & np.isfinite(ur) & (ur >= 0)
        self.ur_last[seen], self.lr_at[seen] = ur[seen], rate[seen]
        with np.errstate(invalid="ignore", divide="ignore"):
            est = np.where(seen, ur, np.where(self.lr_at > 0, self.ur_last * rate / self.lr_at, np.nan))
        est[zeroed] = 0.0  # (a rate of 0 moves nothing, measured or not)
        # (updates rounded away to exactly 0 count only at a negligible rate:
        # at another, the optimizer did nothing, which the frozen rows say)
        tiny_rate = self.lr_now is not None and 0 < self.lr_now[2] <= self.t.lr_negligible
        ok = movable & np.isfinite(est) & ((est > 0) | ((est == 0) & (tiny_rate | zeroed))) & np.isfinite(g) & (g > 0)
        if i < 0 or not ok.any():
            return raw, None
        r, gn = float(np.median(est[ok])), float(np.median(g[ok]))
        self.now = (int(step), r, gn)
        if self.first is None:
            self.first = int(step)
        if self.peak is None or r > self.peak[1]:
            self.peak = self.now
        t, (_, r0, g0) = self.t, self.peak
        collapse = r0 > 0 and r <= t.update_collapse * r0 and r / gn <= t.update_collapse * r0 / g0
        # (a collapse from healthy updates says more than their size now)
        # (negligible at an ordinary rate is the gradients' doing: their own rules)
        reason = "collapse" if collapse else ("negligible" if r < t.update_negligible and tiny_rate else None)
        if reason is None:
            self.since = None
            raw[i] = HEALTHY
            return raw, None
        self.reason = reason
        if self.since is None:
            self.since = int(step)
        if not for_good(step, self.since, self.first, t.lr_window):
            return raw, None  # (not judged yet: neither healthy nor frozen)
        raw[i] = STATE["frozen"]
        onset = np.full(n, -1, np.int64)
        onset[i] = self.since
        return raw, onset

    def _rates(self, step, row, kinds, lr):
        rates = row[kinds.is_mod, _M["lr"]]
        rates = rates[np.isfinite(rates) & (rates >= 0)]
        lo, hi = (float(rates.min()), float(rates.max())) if len(rates) else (lr, lr)
        if not hi == hi:
            return
        self.lr_now = (int(step), lo, hi)
        if self.lr_peak is None or hi > self.lr_peak[1]:
            self.lr_peak = (int(step), hi)

    def update_peak(self):
        """(step, median update ratio, highest rate) at the model's largest
        median update in the run, for the root cause; None: never measured."""
        if self.peak is None:
            return None
        lr = self.lr_peak[1] if self.lr_peak is not None else math.nan
        return (self.peak[0], self.peak[1], lr)

    def evidence(self, code, value, before):
        """The median update ratio now and at its peak, on every row (only
        the <optimizer> row has the state)."""
        now = self.now[1] if self.now else np.nan
        peak = self.peak[1] if self.peak else np.nan
        return np.full(len(code), now), np.full(len(code), peak)

    def event_fields(self, tr):
        """(value, value_before, extra): the update ratio now and at its peak,
        the gradient norms and the learning rates then and now."""
        if tr.to_code == HEALTHY or self.now is None:
            return tr.value, tr.value_before, {}
        extra = {"cause": "update_" + self.reason, "update_peak_step": self.peak[0],
                 "grad_norm_before": self.peak[2], "grad_norm": self.now[2]}
        if self.lr_peak is not None and self.lr_now is not None:
            extra.update(lr_peak=self.lr_peak[1], lr_peak_step=self.lr_peak[0], lr_low=self.lr_now[1],
                         lr_high=self.lr_now[2], lr_step=self.lr_now[0])
        return self.now[1], self.peak[1], extra
