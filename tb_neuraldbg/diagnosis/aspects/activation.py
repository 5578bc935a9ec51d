"""The activation aspect: non-finite outputs, and dead, saturated, collapsed
and exploding activations."""

from __future__ import annotations

from collections import deque

import numpy as np

from ..thresholds import Thresholds
from ._base import HEALTHY, METRIC, STATE, Aspect, LogTrack, RowKinds, blank, grow, nonfinite_before
from .growth import GrowthOrigin

__all__ = ["Activation"]

_M = METRIC
# the statistics whose presence says a module's activations were measured
_MEASURED = [_M[m] for m in ("act_std", "act_absmax", "act_dead_frac", "act_sat_frac", "in_dead_frac")]
#: losses whose median says where the run's loss is now (a block, as the
#: plateau rule's, tames the batches' noise)
_LOSS_BLOCK = 10


class Activation(Aspect):
    """Forward states of the module rows: ``fwd`` (non-finite outputs, checked
    at every step) and ``act`` (the activation statistics, measured every Nth
    step), each against thresholds, the row before it and its own history."""

    EVIDENCE = {"fwd": ("act_nonfinite", "act_nonfinite"), "act": ("act_absmax", None)}

    def __init__(self, thresholds: Thresholds):
        super().__init__()
        self.t = thresholds
        self.track = LogTrack(thresholds.ema_alpha)  # of the output RMS
        self.std_track = LogTrack(thresholds.ema_alpha)  # of the output std
        self.w_max = np.zeros(0)  # the largest weight norm seen (a collapse of the weights)
        # dead units after a functional activation count for the module before
        # it: the effective dead fraction of this step, the last one measured
        # before it, and whether it came from the next row's input
        self.dead_eff = np.zeros(0)
        self.dead_last = np.zeros(0)
        self.dead_via = np.zeros(0, bool)
        self.all_zero = np.zeros(0, bool)  # rows whose whole output was exactly 0 (last measurement)
        # the first step of each row's current run of measurements with one
        # value in the whole output, 0 (dead) or not (collapsed): -1 for none
        self.flat_since = np.zeros(0, np.int64)
        # an explosion compounded over the layers up to here, not this one
        # alone (kept from the last measurement: an explosion may be confirmed
        # once the output is NaN)
        self.cumulative = np.zeros(0, bool)
        # where a growth began, over depth or over time (growth.py), and the
        # step being classified (the events' origin step)
        self.origin = GrowthOrigin(thresholds.act_explode_vs_max)
        self.step = 0
        # the run's losses (its first, its last few) and, per row, their
        # median when the row was last measured alive: whether units that go
        # quiet cost the run anything (see _sparse)
        self.loss_first = np.nan
        self.losses = deque(maxlen=_LOSS_BLOCK)
        self.loss_alive = np.zeros(0)

    def grow(self, kinds: RowKinds) -> None:
        super().grow(kinds)
        n = kinds.n
        self.track.grow(n)
        self.std_track.grow(n)
        self.w_max = grow(self.w_max, n, 0.0)
        self.dead_eff = grow(self.dead_eff, n, np.nan)
        self.dead_last = grow(self.dead_last, n, np.nan)
        self.dead_via = np.zeros(n, dtype=bool)
        self.all_zero = np.zeros(n, dtype=bool)
        self.flat_since = grow(self.flat_since, n, -1)
        self.cumulative = np.zeros(n, dtype=bool)
        self.origin.grow(n)
        self.loss_alive = grow(self.loss_alive, n, np.nan)

    def classify(self, row, conf, has_param, loss_below_first: bool, step: int | None = None) -> dict:
        """{"fwd": (raw, None), "act": (raw, None)}. ``conf``: the confirmed
        ``act`` states; ``has_param``: bool [L], rows with parameters;
        ``loss_below_first``: the recent losses are below the first one;
        ``step``: the step classified (None: one past the last)."""
        self.step = self.step + 1 if step is None else int(step)
        self._note_loss(row)
        act = self._act(row, conf, has_param, loss_below_first)
        # a constant output that was all zeros before (a LayerNorm over one
        # feature: 0 until its bias moves) has carried nothing since then
        onset = np.where(act == STATE["collapsed"], self.flat_since, -1)
        return {"fwd": (self._forward(row), None), "act": (act, onset)}

    def _forward(self, row):
        """Non-finite outputs: checked at every step (a flag from the sum)."""
        nf = row[:, _M["act_nonfinite"]]
        raw = blank(self.kinds.n)
        mod = self.kinds.is_mod
        raw[mod & (nf == 0)] = HEALTHY
        raw[mod & (nf > 0)] = STATE["nonfinite"]
        return raw

    def _act(self, row, conf, has_param, loss_below_first):
        measured = self._measured(row)
        if (not measured.any() and np.isnan(row[:, _M["act_dead_frac"]]).all()
                and np.isnan(row[:, _M["in_dead_frac"]]).all()):
            return self._act_unmeasured(row)
        return self._act_measured(row, conf, has_param, loss_below_first, measured)

    def _measured(self, row):
        """bool [L]: the module rows with an activation statistic at this step."""
        return self.kinds.is_mod & np.isfinite(row[:, _MEASURED]).any(axis=1)

    def _act_unmeasured(self, row):
        """:meth:`_act_measured` at a step that measured no activation (nine
        steps in ten, between full-statistics steps): every row unmeasured,
        and the state moved exactly as the full computation moves it, in a
        tenth of its numpy calls (the worker runs this at every step)."""
        wn = row[:, _M["weight_norm"]]
        self.w_max = np.where(np.isfinite(wn), np.maximum(self.w_max, wn), self.w_max)
        self.dead_last = np.where(np.isnan(self.dead_eff), self.dead_last, self.dead_eff)
        self.dead_eff = row[:, _M["act_dead_frac"]].copy()  # all NaN: nothing measured
        self.dead_via = np.zeros(self.kinds.n, dtype=bool)
        return blank(self.kinds.n)

    def _act_measured(self, row, conf, has_param, loss_below_first, measured):
        t, k, n = self.t, self.kinds, self.kinds.n
        mean = row[:, _M["act_mean"]]
        std = row[:, _M["act_std"]]
        absmax = row[:, _M["act_absmax"]]
        dead_f = row[:, _M["act_dead_frac"]]
        in_dead = row[:, _M["in_dead_frac"]]
        sat_f = row[:, _M["act_sat_frac"]]
        raw = blank(n)
        raw[measured] = HEALTHY
        head, out_rows = _output_layer(has_param, k)
        seen = self.track.count > 0  # once healthy
        with np.errstate(invalid="ignore", over="ignore"):
            rms = np.sqrt(mean * mean + std * std)
            # collapsed: one constant value (not all zeros: that is dead), or
            # an output that stopped varying: its spread fell by the factor
            # that makes gradients vanish (vanish_ratio) below its own history
            # (weights that collapsed to ~0 leave the bias: a near constant)
            collapsed = measured & (absmax > 0) & (std <= t.collapse_rel * absmax)
            collapsed |= measured & (absmax > 0) & (std < t.vanish_ratio * 10.0 ** self.std_track.ema) & (
                self.std_track.count >= t.history_min)
            wn = row[:, _M["weight_norm"]]
            self.w_max = np.where(np.isfinite(wn), np.maximum(self.w_max, wn), self.w_max)
            sat_thr = np.where(conf == STATE["saturated"], t.sat_exit_frac, t.sat_frac)
            # a rectifier's zeros (ReLU6's lower end) are its dead side, judged
            # by the dead fraction; only the top end counts as saturation
            zero_f = row[:, _M["act_zero_frac"]]
            sat_eff = np.where(np.isfinite(dead_f) & np.isfinite(zero_f), sat_f - zero_f, sat_f)
            saturated = measured & (sat_eff >= sat_thr)
            dead_thr = np.where(conf == STATE["dead"], t.dead_exit_frac, t.dead_frac)
            # a functional activation (torch.relu in forward) shows as the next
            # module's dead input; the units belong to the previous module (the
            # one whose pre-activations went negative) when that module is not
            # an activation module itself (those report their own dead units)
            eff = dead_f.copy()
            via = np.zeros(n, dtype=bool)
            via[:-1] = k.prev_is_mod[1:] & np.isnan(dead_f[:-1]) & np.isfinite(in_dead[1:])
            eff[:-1] = np.where(via[:-1], in_dead[1:], eff[:-1])
            # an output that is exactly zero everywhere: every unit is dead
            # (measured on the module itself, whatever its type)
            zero = measured & (absmax == 0)
            eff = np.where(zero, 1.0, eff)
            via &= ~zero
            self.all_zero = np.where(measured, zero, self.all_zero)
            flat = zero | collapsed
            self.flat_since = np.where(measured, np.where(flat, np.where(self.flat_since >= 0, self.flat_since,
                                                                             self.step), -1), self.flat_since)
            self.dead_last = np.where(np.isnan(self.dead_eff), self.dead_last, self.dead_eff)
            self.dead_eff, self.dead_via = eff, via
            batch = row[k.input_index, _M["value"]] if k.input_index >= 0 else np.nan
            by_fraction = not batch < t.dead_min_batch  # (NaN: unknown, judged)
            dead = measured & (((eff >= dead_thr) & by_fraction) | zero)
            dead &= ~self._sparse(eff, zero, conf, dead_thr, measured)
            # the output activation (no layer with parameters after it) of a
            # model that learns becomes confident: sigmoid outputs near 0/1 for
            # BCE are success, not failure. There only a layer born saturated
            # or dead (never once healthy) counts, or an output exactly 0 for
            # every sample (a ReLU at the end of a regression whose targets
            # went negative): it passes no gradient back, nothing learns again.
            out_ok = out_rows & seen
            saturated &= ~out_ok
            dead &= ~(out_ok & ~zero)
            # exploding: amplifies its input (the previous row) a hundredfold,
            # or grew a hundredfold over its own history, beyond a floor.
            # Amplified is the spread: a constant offset is a bias, not a gain
            # (a regression's output bias set to the targets' mean, the
            # initialisation Karpathy's recipe advises, is ~1e5 at step 0)
            rms_prev = np.full(n, np.nan)
            rms_prev[1:] = rms[:-1]
            big = measured & (rms > t.act_explode_floor)
            amp = big & (rms_prev > 0) & (std > t.act_explode_ratio * rms_prev)
            # ... or the network amplified the batch a thousandfold by here
            # (a large initialisation everywhere compounds layer by layer)
            cum = np.zeros(n, dtype=bool)
            if k.input_index >= 0:
                rms_in = rms[k.input_index]
                cum = big & (rms_in > 0) & (std > t.act_explode_ratio * t.act_explode_vs_max * rms_in)
            # (a non-finite output keeps what the last finite one said: the
            # explosion is confirmed at the step its values overflow,
            # tests/test_diagnosis_growth.py)
            self.cumulative = np.where(measured & np.isfinite(std), cum & ~amp, self.cumulative)
            self.origin.feed(self.step, std, measured, rms[k.input_index] if k.input_index >= 0 else np.nan)
            amp |= cum
            growth = big & self.track.grew(rms, t.history_min, t.act_explode_ratio, t.act_explode_vs_max)
            # the model's output layer (the last one with parameters) grows to
            # the scale of its targets (a regression onto values ~1e3) while
            # the loss falls: learning, not an explosion. Only once it was
            # healthy (born exploding still counts) and while the recent
            # losses are below the first one (a divergence raises the loss).
            fit = head & seen & ~cum
            if loss_below_first and fit.any():
                amp &= ~fit
                growth &= ~fit
        raw[collapsed] = STATE["collapsed"]
        raw[saturated] = STATE["saturated"]
        raw[dead] = STATE["dead"]
        raw[amp | growth] = STATE["act_exploding"]
        if measured.any():
            self.origin.note_onset(measured & (amp | growth), conf == STATE["act_exploding"], measured,
                                   self.cumulative)
        ok = (raw == HEALTHY) & np.isfinite(rms)
        self.track.feed(ok & (rms > 0), rms)
        self.std_track.feed(ok & (std > 0), std)
        return raw

    def _note_loss(self, row) -> None:
        """Keep the run's first finite loss and its last ``_LOSS_BLOCK`` ones."""
        i = self.kinds.loss_index
        v = row[i, _M["value"]] if i >= 0 else np.nan
        if np.isfinite(v):
            self.loss_first = v if np.isnan(self.loss_first) else self.loss_first
            self.losses.append(float(v))

    def _sparse(self, eff, zero, conf, dead_thr, measured):
        """bool [L]: rows whose units went quiet at no cost to the run, not dead.

        Death is judged by what it means: a unit that fires on no input passes
        no gradient and cannot recover, so the units a layer loses take what
        they did for the loss with them. Units that go quiet while the loss is
        below its first value and no higher than when the layer was last
        alive are the sparse code of a network that learns (a ReLU
        autoencoder's decoder, a ReLU RNN's last step:
        tests/test_diagnosis_sparse_relu.py). A layer with every unit dead
        (nothing passes), one born dead (its loss is the first one) or
        already dead is judged by its fraction as before."""
        now = float(np.median(self.losses)) if self.losses else np.nan
        with np.errstate(invalid="ignore"):
            alive = measured & (eff < dead_thr)
            sparse = (now < self.loss_first) & (now <= self.loss_alive) & (eff < 1.0) & ~zero & (
                conf != STATE["dead"])
        self.loss_alive = np.where(alive, now, self.loss_alive)
        return sparse

    def blocked_rows(self):
        """bool [L]: the rows before a module whose output was 0 for every
        unit at its last measurement (dead through and through): nothing
        flows back past it, so their gradients are 0 by the chain rule."""
        dead = np.where(np.isnan(self.dead_eff), self.dead_last, self.dead_eff)
        with np.errstate(invalid="ignore"):
            zero = self.kinds.is_mod & ((dead >= 1.0) | self.all_zero)
        out = np.zeros(self.kinds.n, dtype=bool)
        out[:-1] = np.logical_or.accumulate(zero[::-1])[::-1][1:]
        return out

    def first_nonfinite(self, row) -> int | None:
        """The first module (or <loss>) in forward order whose output is
        non-finite at this step; None without one."""
        k = self.kinds
        fwd = np.flatnonzero((k.is_mod | k.is_loss) & (row[:, _M["act_nonfinite"]] > 0))
        return int(fwd[0]) if len(fwd) else None

    def event_fields(self, name, kind, tr, row):
        i = tr.index
        failing = tr.to_code != HEALTHY
        extra = {}
        if kind == "nonfinite":
            extra["side"] = "forward"
            inp = row[i, _M["in_nonfinite"]]
            extra["input_nonfinite"] = bool(inp > 0)
            prev = nonfinite_before(row, i)
            # (in a branch, a finite input means born here whatever came before)
            if prev >= 0 and not inp == 0:
                extra["from_layer"] = self.kinds.names[prev]
            if np.isfinite(row[i, _M["grad_missing"]]):  # (a row with trainable parameters)
                extra["has_params"] = True
        if kind == "activation_explosion" and failing and bool(self.cumulative[i]):
            extra["amplified"] = "cumulative"
        if kind == "activation_explosion" and failing:
            found = self.origin.origin(i, int(tr.onset), bool(self.cumulative[i]))
            if found is not None:
                extra["growth_from"], extra["growth_step"] = self.kinds.names[found[0]], found[1]
        if kind == "dead_activation" and failing and bool(self.dead_via[i]):
            extra["via"] = "functional_activation"
        if kind == "dead_activation" and failing and bool(self.all_zero[i]):
            extra["all_zero"] = True
        if kind in ("activation_collapse", "dead_activation") and failing:
            # weights that collapsed (to a hundredth of their largest norm or less)
            wn = row[i, _M["weight_norm"]]
            if np.isfinite(wn) and self.w_max[i] > 0 and wn <= 0.01 * self.w_max[i]:
                extra["weight_norm"], extra["weight_norm_max"] = float(wn), float(self.w_max[i])
        return tr.value, tr.value_before, extra

    def evidence(self, name, code, value, before):
        if name != "act":
            return value, before
        # dead units after a functional activation: the effective fraction
        dead = code == STATE["dead"]
        return np.where(dead, self.dead_eff, value), np.where(dead, self.dead_last, before)


def _output_layer(has_param, kinds: RowKinds):
    """(head, out): bool [L] of the model's output layer (the last module with
    parameters before <loss>) and of the modules after it (before <loss>)."""
    n = kinds.n
    head = np.zeros(n, dtype=bool)
    out = np.zeros(n, dtype=bool)
    idx = np.flatnonzero(has_param & kinds.is_mod)
    if len(idx) and kinds.loss_index >= 0:
        last = idx[idx < kinds.loss_index]
        if len(last):
            head[last[-1]] = True
            out[last[-1] + 1:kinds.loss_index] = True
    return head, out & kinds.is_mod
