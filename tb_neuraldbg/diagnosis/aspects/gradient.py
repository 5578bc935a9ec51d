"""The gradient aspect: vanishing, exploding, missing and non-finite
gradients, and where non-finite gradients are born in backward."""

from __future__ import annotations

import numpy as np

from ..explain import family
from ..thresholds import Thresholds
from ._base import HEALTHY, METRIC, STATE, UNMEASURED, Aspect, LogTrack, RowKinds, blank, grow

__all__ = ["Gradient"]

_M = METRIC
#: |x| at which a tanh-like output counts as saturated (training/modules.py)
_SAT_LEVEL = 0.99


class Gradient(Aspect):
    """Gradient states of the module rows (hysteresis aspect ``grad``).

    Evidence is relative: a layer against the layers after it (vanishing),
    against the other layers at the same step and against its own history
    (exploding). It also keeps which rows have parameters (the activation
    aspect needs the model's output layer).
    """

    EVIDENCE = {"grad": ("grad_norm", "grad_nonfinite")}

    def __init__(self, thresholds: Thresholds):
        super().__init__()
        self.t = thresholds
        self.track = LogTrack(thresholds.ema_alpha)  # of the gradient norms
        self.has_param = np.zeros(0, bool)  # rows with parameters (grad_missing reported)
        self.last_wn = np.zeros(0)  # last weight norm measured
        # this step's non-finite gradients: modules whose parameters' gradients
        # are non-finite; where they are born in backward (see _backward) and
        # which rows received them from the layers after
        self.param_nonfinite = np.zeros(0, bool)
        self.origin = np.zeros(0, bool)
        self.received = np.zeros(0, bool)
        self.seen_gout = np.zeros(0, bool)  # rows whose output gradient was measured finite
        self.measured = False  # gout_nonfinite was measured at this step
        # bursts: (step, row, norm, its largest healthy norm before), a norm
        # an order of magnitude above anything the row had before; the root
        # cause decides whether one did damage (a loss failure after it)
        self.bursts = []
        self.step = 0
        # gradients exactly 0 at every step so far: the first such step, and
        # how many measured steps in a row (a parameter the optimizer holds
        # whose gradient is always 0 passes no gradient, as a None one)
        self.ever_nonzero = np.zeros(0, bool)
        self.pinned = np.zeros(0, bool)  # output at +-1 (last measured): see _note_pinned
        self.tanh_like = np.zeros(0, bool)
        self.zero_from = np.zeros(0, np.int64)
        self.zero_count = np.zeros(0, np.int64)
        # gradients missing (None): the first step of the current streak of
        # steps without one, its length, and the longest streak that ended
        # with a gradient (an auxiliary loss added every Nth step leaves its
        # head without one N-1 steps in a row: it does pass gradient)
        self.miss_from = np.zeros(0, np.int64)
        self.miss_count = np.zeros(0, np.int64)
        self.max_gap = np.zeros(0, np.int64)

    def grow(self, kinds: RowKinds) -> None:
        super().grow(kinds)
        n = kinds.n
        self.track.grow(n)
        self.has_param = grow(self.has_param, n, False)
        self.last_wn = grow(self.last_wn, n, np.nan)
        self.param_nonfinite = np.zeros(n, bool)
        self.origin = np.zeros(n, bool)
        self.received = np.zeros(n, bool)
        self.seen_gout = np.zeros(n, bool)
        self.measured = False
        self.ever_nonzero = grow(self.ever_nonzero, n, False)
        self.pinned = grow(self.pinned, n, False)
        self.tanh_like = np.array([family(ty) in ("bounded", "recurrent") for ty in kinds.types], bool).reshape(n)
        self.zero_from = grow(self.zero_from, n, -1)
        self.zero_count = grow(self.zero_count, n, 0)
        self.miss_from = grow(self.miss_from, n, -1)
        self.miss_count = grow(self.miss_count, n, 0)
        self.max_gap = grow(self.max_gap, n, 0)

    def classify(self, step: int, row, conf, scaler_active: bool, blocked=None) -> dict:
        """{"grad": (raw, onset | None)}; ``conf``: the confirmed gradient
        states; ``scaler_active``: a GradScaler is in use at this step;
        ``blocked``: a callable giving bool [L], the rows before a layer
        whose output was 0 for every unit at its last measurement (their
        gradients are 0 by the chain rule: the dead layer is the finding,
        not them), called only when needed."""
        t, k, n = self.t, self.kinds, self.kinds.n
        self.step = step
        g = row[:, _M["grad_norm"]]
        w = row[:, _M["weight_norm"]]
        missing = row[:, _M["grad_missing"]]
        mod = k.is_mod
        gnf = row[:, _M["grad_nonfinite"]]
        # An infinite norm over gradients an exact count found finite (a
        # replayed step counts them) is a float32 overflow of the sum of
        # squares: a finite, huge gradient, judged as exploding.
        overflow = np.isinf(g) & (gnf == 0)
        if overflow.any():
            g = np.where(overflow, np.float32(np.finfo(np.float32).max), g)
        # a NaN norm of gradients that all arrived is a NaN gradient, not a gap
        nonfinite = mod & ((gnf > 0) | np.isinf(g) | (np.isnan(g) & (missing == 0)))
        self.param_nonfinite = nonfinite
        if self._backward(row, nonfinite):
            # with the output gradients measured, a parameterless module can
            # be where the non-finite gradient is born (a bad custom backward)
            nonfinite = nonfinite | self.origin
        self.has_param |= mod & np.isfinite(missing)
        # no gradient although the module ran in this forward pass (a module
        # skipped by conditional computation, e.g. an unrouted expert, is not
        # expected to get one)
        ran = (np.isfinite(row[:, _M["act_nonfinite"]]) | np.isfinite(row[:, _M["act_mean"]])
               | (row[:, _M["ran_without_grad"]] > 0))  # (under torch.no_grad(): no statistics, but it ran)
        # ... and none of its parameters got one (an unused extra parameter
        # of a module that otherwise learns is a DDP nuisance, not a failure)
        no_grad = mod & (missing > 0) & np.isnan(g) & ran & ~nonfinite
        fin = mod & np.isfinite(g) & ~no_grad & ~nonfinite
        raw = blank(n)
        raw[fin] = HEALTHY
        # weight norms are measured every Nth step: use the last one known
        wf = np.isfinite(w)
        self.last_wn[wf] = w[wf]
        w = self.last_wn
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(fin & (w > 0), g / w, np.nan)
        if fin.sum() >= 2:
            # vanishing: far below the largest gradient among the layers after
            # it (toward the loss), both raw and relative to the weights
            down_g = _strict_suffix_max(np.where(fin, g, -np.inf))
            down_r = _strict_suffix_max(np.where(np.isfinite(rel), rel, -np.inf))
            ratio = np.where(conf == STATE["vanishing"], t.vanish_exit_ratio, t.vanish_ratio)
            with np.errstate(invalid="ignore"):
                low_g = (down_g > 0) & (g < ratio * down_g)
                low_r = ~np.isfinite(rel) | ~(down_r > 0) | (rel < ratio * down_r)
            low = fin & low_g & low_r
            # gradients vanish on their way to the input: the vanishing layers
            # are a prefix of the network. A layer inside a residual branch
            # whose last BatchNorm is zero-initialised has a tiny gradient
            # while the layers before it get theirs through the skip path.
            prefix = np.logical_and.accumulate(np.where(fin, low, True))
            raw[low & prefix] = STATE["vanishing"]
        else:
            low = np.zeros(n, dtype=bool)
        # exploding, against the other layers at this step (born exploding);
        # the reference leaves out the layers whose gradient is tiny
        exploding = np.zeros(n, dtype=bool)
        ref = fin & ~low
        if ref.sum() >= 3:
            gr = g[ref]
            # cheap exit: nothing can exceed explode_cross x the median when
            # the largest is within explode_cross of the smallest
            quiet = gr.max() <= t.explode_cross * gr.min()
            med_g = np.inf if quiet else np.median(gr)
            finr = np.isfinite(rel) & ref
            med_r = np.median(rel[finr]) if (not quiet and finr.sum() >= 3) else np.nan
            with np.errstate(invalid="ignore"):
                cross = fin & (g > t.explode_cross * med_g) & (med_g > 0)
                if med_r > 0:
                    cross &= ~finr | (rel > t.explode_cross * med_r)
            exploding |= cross
        # ... and against its own history
        with np.errstate(invalid="ignore", over="ignore"):
            exploding |= fin & self.track.grew(g, t.history_min, t.explode_growth, t.explode_vs_max)
            # a burst: a single step an order of magnitude above the largest
            # norm the row ever had (recurrent nets explode in bursts, not by
            # growing); kept for the root cause, which judges it by the loss
            burst = fin & (self.track.count >= t.history_min) & (g > t.explode_vs_max * self.track.max)
        for i in np.flatnonzero(burst):
            self.bursts.append((self.step, int(i), float(g[i]), float(self.track.max[i])))
        raw[exploding & fin] = STATE["exploding"]
        missing_onset = self._missing(step, no_grad, fin | nonfinite, raw)
        onset = self._always_zero(step, row, g, fin, raw, blocked)
        if missing_onset is not None:
            onset = missing_onset if onset is None else np.where(missing_onset >= 0, missing_onset, onset)
        if scaler_active:
            # with a GradScaler, inf/NaN gradients are how the scaler finds its
            # scale: a skipped step, judged by the scaler aspect, not here
            raw[nonfinite] = UNMEASURED
        else:
            raw[nonfinite] = STATE["nonfinite"]
            li = k.loss_index
            if li >= 0 and self.measured:
                # born in the loss's backward (a finite loss whose gradient is
                # not: sqrt of a zero distance): <loss> is where it is born
                if nonfinite.any() and self.born_in_loss() and (
                        np.isfinite(row[li, _M["value"]]) or self.loss_unseen_forward_finite(row)):
                    raw[li] = STATE["nonfinite"]
                elif conf[li] == STATE["nonfinite"] and not nonfinite.any():
                    raw[li] = HEALTHY
        # (a burst does not raise the reference it is judged against)
        self.track.feed((raw == HEALTHY) & (g > 0) & ~burst, g)
        return {"grad": (raw, onset)}

    def _missing(self, step, no_grad, got, raw):
        """Rows without a gradient at every step of a streak long enough to
        say "never": ``persist_vanishing`` steps (as long as a gradient that
        is merely small must stay so), and more than twice the longest gap
        the row had before between two gradients (a head trained every Nth
        step gets one every N steps: tests/test_diagnosis_loss_origin.py).
        ``no_gradient`` from the streak's first step; rows still within it
        are left unmeasured. In place on ``raw``; returns the onsets (-1:
        none), or None."""
        ended = got & (self.miss_count > 0)
        if ended.any():
            self.max_gap = np.where(ended, np.maximum(self.max_gap, self.miss_count), self.max_gap)
        self.miss_count = np.where(no_grad, self.miss_count + 1, 0)
        self.miss_from = np.where(no_grad, np.where(self.miss_from < 0, step, self.miss_from), -1)
        if not no_grad.any():
            return None
        need = np.maximum(self.t.persist_vanishing, 2 * self.max_gap + 1)
        # (the state's own persistence adds persist_steps to this count)
        judged = no_grad & (self.miss_count > np.maximum(0, need - self.t.persist_steps))
        raw[judged] = STATE["no_gradient"]
        raw[no_grad & ~judged] = UNMEASURED
        return np.where(judged, self.miss_from, -1)

    def _always_zero(self, step, row, g, fin, raw, blocked):
        """Rows whose gradient has been exactly 0 at every step so far, on
        parameters that the optimizer holds (``opt_group`` not -1) and that
        all got a ``.grad``: ``no_gradient`` from the first of those steps,
        confirmed after as many steps as a vanishing gradient from the first
        step (``persist_vanishing_born``: a zero-initialised layer after it,
        ReZero or adaLN-Zero, lets gradients through within its first
        updates); until then they are judged as any gradient. In place on
        ``raw``; returns the onsets (-1: none), or None."""
        self.ever_nonzero |= fin & (g != 0)
        zero = fin & (g == 0) & ~self.ever_nonzero
        if not zero.any():  # (most steps of most runs: nothing else to do)
            return None
        zero &= (row[:, _M["grad_missing"]] == 0) & (row[:, _M["opt_group"]] != -1)
        self._note_pinned(row, zero)
        self.zero_from = np.where(zero & (self.zero_from < 0), step, self.zero_from)
        self.zero_from[~zero] = -1
        self.zero_count = np.where(zero, self.zero_count + 1, 0)
        # (the state's own persistence adds persist_steps to this count)
        judged = zero & (self.zero_count > max(0, self.t.persist_vanishing_born - self.t.persist_steps))
        if blocked is not None and judged.any():
            judged &= ~blocked()
        raw[judged] = STATE["no_gradient"]
        return np.where(judged, self.zero_from, -1)

    def _backward(self, row, param_bad) -> bool:
        """Where non-finite gradients are born in backward, from gout_nonfinite.

        The origin is a module whose output gradient is finite while the
        gradients it produces are not: its own parameters' gradients, or the
        gradient it passed on to its input (the output gradient of the module
        before it in forward order). Sets ``origin`` (rows where it is born)
        and ``received`` (rows whose output gradient was already non-finite);
        returns whether the column was measured at all (NaN/absent in older
        logs: ``origin_row`` falls back to the deepest layer with non-finite
        parameter gradients).
        """
        mod = self.kinds.is_mod
        gout = row[:, _M["gout_nonfinite"]]
        fin = mod & (gout == 0)
        bad = mod & (gout > 0)
        measured = bool(fin.any() or bad.any())
        prev_bad = np.zeros(len(mod), dtype=bool)
        prev_bad[1:] = bad[:-1]
        self.origin = fin & (param_bad | prev_bad) if measured else np.zeros(len(mod), dtype=bool)
        self.received = bad
        self.seen_gout = fin
        self.measured = measured
        return measured

    def origin_row(self) -> int | None:
        """The row where this step's non-finite gradients are born in backward
        (the first module in backward order, from gout_nonfinite), else the
        deepest module with non-finite parameter gradients; None without any."""
        bwd = np.flatnonzero(self.origin) if self.measured else np.zeros(0, np.int64)
        if not len(bwd) and self.born_in_loss():
            return self.kinds.loss_index
        if not len(bwd):
            bwd = np.flatnonzero(self.param_nonfinite)
        return int(bwd[-1]) if len(bwd) else None

    def born_in_loss(self) -> bool:
        """The gradient is already non-finite when it reaches the model: the
        module that feeds the loss (the deepest one whose output gradient was
        measured) received it, so it is born in the loss's backward."""
        if not self.measured or self.kinds.loss_index < 0:
            return False
        seen = np.flatnonzero(self.kinds.is_mod & (self.received | self.seen_gout))
        return bool(len(seen) and self.received[seen[-1]] and not self.origin.any())

    def loss_unseen_forward_finite(self, row) -> bool:
        """The loss's value is not recorded (a plain function, not a watched
        criterion) while every module's forward output was measured finite:
        the first non-finite value is then the gradient entering the model's
        output, born in the loss (its forward or its backward), not in the
        layers it reaches (tests/test_diagnosis_loss_origin.py)."""
        li = self.kinds.loss_index
        if not (np.isnan(row[li, _M["value"]]) and np.isnan(row[li, _M["act_nonfinite"]])):
            return False
        nf = row[self.kinds.is_mod, _M["act_nonfinite"]]
        return bool(len(nf) and (nf == 0).all())

    def event_fields(self, name, kind, tr, row):
        if kind == "no_gradient" and tr.to_code != HEALTHY and row[tr.index, _M["ran_without_grad"]] > 0:
            return tr.value, tr.value_before, {"ran_without_grad": True}
        if kind == "no_gradient" and tr.to_code != HEALTHY and self.zero_from[tr.index] >= 0:
            extra = {"cause": "zero_gradient"}
            if self.pinned[tr.index]:
                extra["saturated_output"] = True
            return 0.0, tr.value_before, extra
        if kind != "nonfinite":
            return tr.value, tr.value_before, {}
        i = tr.index
        k = self.kinds
        nf = row[:, _M["act_nonfinite"]]
        extra = {"side": "backward",
                 "forward_nonfinite": bool(((k.is_mod | k.is_loss | k.is_input) & (nf > 0)).any())}
        if i == k.loss_index:
            extra.update(bwd_origin=True, in_loss=True)
            if np.isnan(row[i, _M["value"]]):
                extra["loss_unseen"] = True
        elif self.measured:
            extra["bwd_origin"] = bool(self.origin[i])
            if self.received[i]:
                extra["received"] = True
            elif self.origin[i]:
                # born in the gradient it passed on to its input, not (only)
                # in its parameters' gradients
                inp = i > 0 and bool(self.received[i - 1])
                gnf = row[i, _M["grad_nonfinite"]]
                par = bool(gnf > 0 or (np.isinf(row[i, _M["grad_norm"]]) and gnf != 0))
                extra["via"] = "both" if inp and par else ("input" if inp else "parameters")
        return tr.value, tr.value_before, extra

    def _note_pinned(self, row, rows) -> None:
        """Whether each of ``rows`` (bool [L]) has its output at the bound of a
        tanh-like range, as last measured (activations are measured on some
        steps only): a bounded or recurrent module (tanh/sigmoid, an
        RNN/GRU/LSTM hidden state) whose max |x| is at most 1 and whose RMS is
        at least ``_SAT_LEVEL`` (the writer's saturation level): every unit
        at +-1, where the derivative is exactly 0 in float32
        (tests/test_diagnosis_scale.py)."""
        mean, std, absmax = (row[:, _M[m]] for m in ("act_mean", "act_std", "act_absmax"))
        seen = rows & np.isfinite(mean) & np.isfinite(std) & np.isfinite(absmax) & self.tanh_like
        with np.errstate(invalid="ignore"):
            pinned = (absmax <= 1.0) & (np.sqrt(mean * mean + std * std) >= _SAT_LEVEL)
        self.pinned = np.where(seen, pinned, self.pinned)

def _strict_suffix_max(a: np.ndarray) -> np.ndarray:
    """out[i] = max(a[i+1:]) (-inf for the last element)."""
    out = np.full(len(a), -np.inf)
    if len(a) > 1:
        out[:-1] = np.maximum.accumulate(a[::-1])[::-1][1:]
    return out
