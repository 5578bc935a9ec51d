"""The ``<optimizer>`` aspect: the hyperparameters of every param group and
their changes, gradients that accumulate across steps, the collapse of a
GradScaler's scale with where its inf/NaN come from, and an optimizer that
never stepped."""

from __future__ import annotations

import math
from collections import deque
from typing import NamedTuple

import numpy as np

from ..thresholds import Thresholds
from ._base import HEALTHY, METRIC, STATE, UNMEASURED, Aspect, blank

__all__ = ["Optimizer", "Rate"]

_M = METRIC
#: GradScaler's default init_scale: the top of the range a scale is judged
#: against (``Optimizer._observe``; tests/test_diagnosis.py, scaler tests)
_SCALE_WORKING = 2.0 ** 16
#: The columns of a param group's hyperparameters (its id first).
_FACTS = np.array([_M["opt_group"], _M["lr"], _M["weight_decay"], _M["momentum"]])


class Rate(NamedTuple):
    """What the optimizer did at one step, for the other aspects."""

    lr: float  # learning rate of the first group (NaN: unknown)
    skipped: bool  # a GradScaler back-off skipped the step
    scaler_active: bool  # a GradScaler is in use


class Optimizer(Aspect):
    """The <optimizer> row (hysteresis aspects ``scaler`` and ``accum``).

    ``scaler``: the scale is recorded before ``scaler.update()``: a decrease
    seen at a step means the previous step found inf/NaN and was skipped.
    ``accum``: layers whose gradients still held the previous step's when
    this step's backward began (``grad_carried``: a forgotten or ineffective
    ``zero_grad()``), reported as ``exploding`` on <optimizer>, where the fix
    goes (the loop, not a layer).

    It also keeps, for the root cause, the learning-rate jumps and the recent
    rates, every discontinuity of a param group's hyperparameters (from the
    rows' ``opt_group``/``lr``/``weight_decay``/``momentum``) and the step
    where the rate fell to a thousandth of its peak.

    ``nostep`` (decided at the run's end, :meth:`final`): a row whose
    ``steps_missing`` is above 0 says that the watched optimizer never
    stepped while backward passes ran (the writer records that row once, at
    close): ``frozen`` on <optimizer>, from that row's step.
    """

    EVIDENCE = {"scaler": ("scale", None), "accum": ("grad_carried", None), "nostep": ("steps_missing", None)}
    FINAL = ("nostep",)

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
        # per param group: {(group, name): recent effective values}, and the
        # discontinuities found (step, group, name, before, after, window, rows)
        self.hyper_hist: dict = {}
        self.hyper_raw: dict = {}  # {group: (lr, weight_decay, momentum)} as set at the step before
        self.hyper_changes = []
        self._facts_prev = None  # the last rows' facts (skip unchanged steps)
        self.lr_peak = 0.0
        self._lr_max = math.nan  # the highest rate of any group at the last step
        self._group_values = []  # per group: (group, effective values, values, its layers)
        self.lr_collapse = None  # (step, peak, lr): the rate fell to vanish_ratio x its peak
        self.accum_frac = math.nan  # this step's fraction of layers with leftover gradients
        self.accum_rows = ()
        self.unstepped = None  # (step, backward passes) of a row saying the optimizer never stepped

    def observe(self, step: int, row) -> Rate:
        """Read this step's learning rate and scale (before the other aspects)."""
        rate = self._observe(step, row)
        self._groups(step, row, rate.lr)
        i = self.kinds.opt_index
        if i >= 0 and row[i, _M["steps_missing"]] > 0:  # (NaN: not this row)
            self.unstepped = (int(step), float(row[i, _M["steps_missing"]]))
        self.prev_step = step
        return rate

    def highest_rate(self, lr0: float) -> float:
        """The highest learning rate of any param group at this step (from
        the rows' ``lr``), else ``lr0`` (the first group's): a run is frozen
        only when every group is at 0, not when its first one is (a
        pretrained embedding held at lr 0 in group 0 on purpose)."""
        return self._lr_max if self._lr_max == self._lr_max else lr0

    def _groups(self, step, row, lr0) -> None:
        """The hyperparameters of each param group at this step: their
        discontinuities, and the collapse of the rate."""
        mod = self.kinds.is_mod
        facts = row[:, _FACTS][mod]
        seen = facts.tobytes()
        if seen != self._facts_prev:
            # (recomputed only when some fact changed: most steps reuse it;
            # a NaN of other bits than the last one's recomputes the same)
            self._facts_prev = seen
            group = facts[:, 0]
            known = np.isfinite(group) & (group >= 0)
            lr_rows = facts[known, 1]
            self._lr_max = float(np.nanmax(lr_rows)) if np.isfinite(lr_rows).any() else math.nan
            names = np.asarray(self.kinds.names)[mod]
            gids, first = np.unique(group[known], return_index=True)
            rows_known = np.flatnonzero(known)
            self._group_values = []
            for g, i in zip(gids.astype(int), rows_known[first]):
                lr, wd, mom = (float(v) for v in facts[i, 1:])
                members = tuple(names[known & (group == g)])
                effs = (("lr", lr), ("weight_decay", lr * wd), ("momentum", 1.0 / max(1e-12, 1.0 - mom)))
                self._group_values.append((int(g), effs, (lr, wd, mom), members))
        self._note_lr(step, self.highest_rate(lr0))
        for g, effs, values, members in self._group_values:
            raw_before = self.hyper_raw.get(g)
            for name, eff in effs:
                self._change(step, g, name, eff, values, members, raw_before)
            self.hyper_raw[g] = values

    def _change(self, step, group, name, eff, values, members, raw_before=None) -> None:
        """A discontinuity of one effective hyperparameter of one group: a
        rise by lr_jump_factor after a few steps of a slowly varying value
        (lr: the rate; weight_decay: lr x weight_decay, the fraction of the
        weights decayed per step, from at least 1e-3 of them; momentum: its
        horizon 1 / (1 - momentum)). The effective decay rises with the rate
        too: it is the weight decay's change only when the value the user
        sets moved (``raw_before``: the group's values at the step before;
        a rate x1000 under AdamW's weight_decay=0.01 is the rate's change,
        tests/test_model_zoo.py)."""
        if not math.isfinite(eff):
            return
        t = self.t
        hist = self.hyper_hist.setdefault((group, name), deque(maxlen=4))
        steady = len(hist) == hist.maxlen and all(0.5 * b <= a <= 2.0 * b for a, b in zip(list(hist)[1:], hist))
        prev = hist[-1] if hist else math.nan
        floor = 1e-3 if name == "weight_decay" else 0.0
        wd_moved = name != "weight_decay" or raw_before is None or not (
            0.5 * raw_before[1] <= values[1] <= 2.0 * raw_before[1])
        if (steady and wd_moved and eff > floor and eff >= t.lr_jump_factor * prev
                and (prev > 0 or name == "weight_decay")):
            lr, wd, mom = values
            before = {"lr": prev, "weight_decay": raw_before[1] if raw_before is not None else math.nan,
                      "momentum": 1.0 - 1.0 / prev if prev > 0 else math.nan}[name]
            after = {"lr": lr, "weight_decay": wd, "momentum": mom}[name]
            # weight decay acts slowly: it matters once it shrank the weights tenfold
            window = t.lr_window if name != "weight_decay" else max(t.lr_window, int(math.log(10) / eff) + 1)
            self.hyper_changes.append((int(step), group, name, before, after, window, members))
        hist.append(eff)

    def _note_lr(self, step, lr) -> None:
        if not (lr == lr):  # NaN: unknown
            return
        if lr > self.lr_peak:
            self.lr_peak = lr
            self.lr_collapse = None
        elif self.lr_collapse is None and lr <= self.t.vanish_ratio * self.lr_peak:
            self.lr_collapse = (int(step), self.lr_peak, float(lr))

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
        # Back-offs are the scaler's search until the scaled gradients fit: a
        # scale started far above its working range (init_scale=2**32) halves
        # a dozen times and settles. A collapse is a run of back-offs that
        # takes the scale 2**scaler_backoffs below where it worked, counted
        # from GradScaler's default 2**16 at most (a scale that never fits
        # keeps halving: a non-finite value the scale does not cause).
        floor = min(self.scale_max, _SCALE_WORKING) * 2.0 ** -t.scaler_backoffs
        collapsed = self.dec_run > 0 and scale <= floor
        if scale == prev and self.dec_run >= t.scaler_backoffs and scale <= floor:
            collapsed = True  # stuck at the bottom (e.g. underflowed to 0)
        elif scale == prev:
            self.dec_run = 0
        self.scale_code = STATE["scaler_collapse"] if collapsed else HEALTHY
        return Rate(lr, skipped, True)

    def classify(self, row) -> dict:
        """{"scaler": (raw, onset | None), "accum": (raw, None)}: this step's
        scaler state (after ``observe``) and whether gradients accumulate."""
        out = {"accum": (self._accum(row), None)}
        raw = blank(self.kinds.n)
        i = self.kinds.opt_index
        if i < 0 or self.scale_code == UNMEASURED:
            out["scaler"] = (raw, None)
            return out
        raw[i] = self.scale_code
        onset = np.full(self.kinds.n, -1, np.int64)
        onset[i] = self.dec_start
        out["scaler"] = (raw, onset)
        return out

    def _accum(self, row):
        """Exploding on <optimizer> while layers that the optimizer holds
        start their backward with the previous step's gradients."""
        raw = blank(self.kinds.n)
        i = self.kinds.opt_index
        mod = self.kinds.is_mod
        with_grad = mod & np.isfinite(row[:, _M["grad_norm"]])
        if i < 0 or not with_grad.any():
            return raw
        # (a layer the optimizer does not hold is never cleared by it: that
        # is the frozen layer's story, not an accumulation)
        carried = with_grad & (row[:, _M["grad_carried"]] > 0) & (row[:, _M["opt_group"]] != -1)
        self.accum_frac = float(carried.sum() / with_grad.sum())
        self.accum_rows = tuple(self.kinds.names[j] for j in np.flatnonzero(carried))
        raw[i] = STATE["exploding"] if carried.any() else HEALTHY
        return raw

    def final(self, confirmed) -> dict:
        """{"nostep": (raw, onset)} at the run's end: ``frozen`` on <optimizer>
        from the step of the row that says the optimizer never stepped
        (``confirmed``: the aspect's confirmed codes); {} without one."""
        i = self.kinds.opt_index
        if self.unstepped is None or i < 0 or confirmed[i] != HEALTHY:
            return {}
        raw = blank(self.kinds.n)
        raw[i] = STATE["frozen"]
        onset = np.full(self.kinds.n, -1, np.int64)
        onset[i] = self.unstepped[0]
        return {"nostep": (raw, onset)}

    def note_origin(self, origin, skipped: bool) -> None:
        """Where this step's inf/NaN first appear, (side "forward"/"backward",
        row) or None: the origin of the back-offs that follow."""
        self.last_origin = origin
        if skipped and self.dec_origin is None:
            self.dec_origin = origin

    def event_fields(self, name, kind, tr, row):
        if name == "nostep":
            n = self.unstepped[1] if self.unstepped else math.nan
            return n, math.nan, {"cause": "never_stepped", "backward_passes": None if math.isnan(n) else int(n)}
        if name == "accum":
            if tr.to_code == HEALTHY:
                return 0.0, tr.value_before, {}
            return self.accum_frac, 0.0, {"cause": "grad_accumulation", "layers": list(self.accum_rows[:5]),
                                          "layer_count": len(self.accum_rows)}
        extra = {}
        if tr.to_code != HEALTHY and self.dec_origin is not None:
            side, idx = self.dec_origin
            extra["origin"] = self.kinds.names[idx]
            extra["origin_side"] = side
        return tr.value, tr.value_before, extra
