"""Classification of one statistics row into raw per-layer states.

``Classifier.classify(step, row, confirmed)`` returns, for every *aspect* of a
layer, the raw state code of each row at this step (``UNMEASURED`` where the
statistics are NaN): the gradient aspect (healthy / vanishing / exploding /
nonfinite / no_gradient), the activation aspect (healthy / dead / saturated /
collapsed / act_exploding / nonfinite), the weight aspect (healthy / frozen),
and the aspects of the pseudo-layers: ``<input>`` (data_anomaly), ``<loss>``
(nonfinite / loss_spike; loss_plateau; initial_loss) and ``<optimizer>``
(scaler_collapse).

Evidence is relative wherever possible (see ``Thresholds``): a layer against
its own running history (exponential averages of log-magnitudes, fed only by
healthy values so a failure does not drag its own reference) and against the
other layers at the same step (medians, or the layers after it for vanishing
gradients). Everything is vectorised over layers; the per-step cost is a few
dozen numpy operations on [L] arrays.

The classifier also keeps what the root cause needs to know about the run
(learning-rate jumps, steps where most layers moved far, the origin of the
non-finite values behind GradScaler back-offs).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from ..format import metadata
from .thresholds import Thresholds
from .transitions import UNMEASURED

__all__ = ["Classifier", "ASPECTS", "RowKinds"]

_M = metadata.METRIC_INDEX
_S = metadata.STATE_CODE
HEALTHY = _S["healthy"]
#: losses per block of the plateau rule (a block median tames batch noise)
_PLATEAU_BLOCK = 10

#: aspects of a layer, each with its own hysteresis
ASPECTS = ("grad", "fwd", "act", "weight", "input", "loss", "plateau", "init", "scaler")


class RowKinds:
    """Which rows are modules and which are the pseudo-layers."""

    def __init__(self, layers):
        names = [str(l.get("name", "")) for l in layers]
        self.names = names
        self.types = [str(l.get("type", "")) for l in layers]
        n = len(names)
        self.is_input = np.array([x == metadata.PSEUDO_INPUT for x in names], dtype=bool).reshape(n)
        self.is_loss = np.array([x == metadata.PSEUDO_LOSS for x in names], dtype=bool).reshape(n)
        self.is_opt = np.array([x == metadata.PSEUDO_OPTIMIZER for x in names], dtype=bool).reshape(n)
        self.is_mod = ~(self.is_input | self.is_loss | self.is_opt)
        # the previous row in forward order feeds the in_* statistics of a
        # module; the batch itself (<input>) is not an activation
        prev_is_mod = np.zeros(n, dtype=bool)
        prev_is_mod[1:] = self.is_mod[:-1]
        self.prev_is_mod = prev_is_mod
        self.input_index = int(np.flatnonzero(self.is_input)[0]) if self.is_input.any() else -1
        self.loss_index = int(np.flatnonzero(self.is_loss)[0]) if self.is_loss.any() else -1
        self.opt_index = int(np.flatnonzero(self.is_opt)[0]) if self.is_opt.any() else -1


def _log10(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log10(x)


def _grow(a, n, fill):
    k = n - len(a)
    return a if k <= 0 else np.concatenate([a, np.full(k, fill, a.dtype)])


class Classifier:
    """Raw per-layer states of each step, with the running references."""

    def __init__(self, layers, thresholds: Thresholds, num_classes: int | None = None):
        self.t = thresholds
        self.num_classes = num_classes
        self.kinds = RowKinds(layers)
        n = len(layers)
        self.n = 0
        # per-layer running references (log10 magnitudes, healthy values only)
        self.g_ema = np.zeros(0)
        self.g_max = np.zeros(0)
        self.g_cnt = np.zeros(0, np.int64)
        self.a_ema = np.zeros(0)
        self.a_max = np.zeros(0)
        self.a_cnt = np.zeros(0, np.int64)
        self.ur_seen = np.zeros(0, bool)  # update_ratio ever measured
        self.has_param = np.zeros(0, bool)  # rows with parameters (grad_missing reported)
        self.last_w = np.zeros(0)
        self.last_wn = np.zeros(0)
        self.last_w_step = np.zeros(0, np.int64)
        self.grow(layers, n)
        # <input>: recent healthy batches (log10 std, log10 max|x|)
        self.in_log_std = _Window(self.t.input_window)
        self.in_log_max = _Window(self.t.input_window)
        self.in_mean = _Window(self.t.input_window)
        self.input_rms0 = math.nan  # scale of the first batch
        # <loss>
        self.loss_hist = _Window(self.t.loss_window)
        self.loss_min = math.inf
        self.plateau_first_step = None  # first step with lr > 0
        self.plateau_block = []  # losses of the block being filled
        self.plateau_block_step = None  # its first step
        self.plateau_blocks = []  # medians of the complete blocks
        self.plateau_recent = _Window(self.t.plateau_window)  # the last losses
        self.plateau_levels = []  # median of the last plateau_window losses, at each block's end
        self.plateau_level_steps = []  # the first step of each level's window
        self.plateau_block_steps = []  # their first steps
        self.plateau_code = None
        self.plateau_reason = "flat"
        self.plateau_steps = 0  # losses seen with lr > 0
        self.plateau_onset = -1  # start of the current flat span
        self.plateau_level_before = math.nan  # loss level at its start
        self.plateau_level = math.nan  # loss level now
        self.first_loss = None  # (step, value)
        self.init_done = False
        # <optimizer>
        self.lr_prev = math.nan
        self.lr_max = 0.0
        self.lr_jumps = []  # (step, lr_before, lr_after)
        self.lr_hist = deque(maxlen=4)  # the last learning rates
        # (step, lr) of the last steps: a schedule that keeps raising the rate
        # (no single jump) over ``lr_window`` steps before a failure
        self.lr_steps = deque(maxlen=4 * max(1, self.t.lr_window))
        self.scale_prev = math.nan
        self.scale_max = 0.0
        self.dec_run = 0
        self.dec_start = -1
        self.dec_origin = None  # (kind "forward"/"backward", row) of a back-off run
        self.last_origin = None  # where the last non-finite values appeared
        self.prev_opt_step = -1
        self.scaler_active = False
        self.high_update_steps = []  # (step, lr): most layers moved > update_ratio_high
        self.first_step = None

    def grow(self, layers, n: int) -> None:
        """Extend to ``n`` rows (after add_layers)."""
        self.kinds = RowKinds(layers)
        self.g_ema = _grow(self.g_ema, n, np.nan)
        self.g_max = _grow(self.g_max, n, 0.0)
        self.g_cnt = _grow(self.g_cnt, n, 0)
        self.a_ema = _grow(self.a_ema, n, np.nan)
        self.a_max = _grow(self.a_max, n, 0.0)
        self.a_cnt = _grow(self.a_cnt, n, 0)
        self.ur_seen = _grow(self.ur_seen, n, False)
        self.has_param = _grow(self.has_param, n, False)
        self.last_w = _grow(self.last_w, n, np.nan)
        self.last_wn = _grow(self.last_wn, n, np.nan)
        self.last_w_step = _grow(self.last_w_step, n, -10)
        # per-step by-products of _act, read by the engine for its messages
        self.dead_eff = np.full(n, np.nan)
        self.dead_via = np.zeros(n, dtype=bool)
        self.act_cumulative = np.zeros(n, dtype=bool)
        # where this step's non-finite gradients come from (see _backward):
        # born in the row's backward / received from the layers after it
        self.bwd_origin = np.zeros(n, dtype=bool)
        self.bwd_received = np.zeros(n, dtype=bool)
        self.bwd_measured = False  # gout_nonfinite was measured at this step
        self.fwd_nonfinite = False  # some forward output was non-finite at this step
        self.n = n

    # ------------------------------------------------------------------ main
    def classify(self, step: int, row: np.ndarray, confirmed: dict) -> dict:
        """Raw states of every aspect: {aspect: (raw int16 [L], onset int [L] | None)}.

        ``row`` is float64 [L, M]; ``confirmed`` maps aspect -> the confirmed
        codes (exit thresholds differ from entry ones: hysteresis on values).
        """
        if self.first_step is None:
            self.first_step = step
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return self._classify(step, row, confirmed)

    def _classify(self, step, row, confirmed):
        k = self.kinds
        opt = self._optimizer(step, row)
        out = {
            "grad": (self._grad(row, confirmed["grad"]), None),
            "fwd": (self._forward_nonfinite(row), None),
            "act": (self._act(row, confirmed["act"]), None),
        }
        out["weight"] = (self._weight(step, row, out["grad"][0], opt), None)
        n = self.n
        raw_in = np.full(n, UNMEASURED, np.int16)
        if k.input_index >= 0:
            raw_in[k.input_index] = self._input(row[k.input_index])
        out["input"] = (raw_in, None)
        for name in ("loss", "plateau", "init"):
            out[name] = (np.full(n, UNMEASURED, np.int16), None)
        if k.loss_index >= 0:
            self._loss(step, row[k.loss_index], opt, out, confirmed)
        raw_sc = np.full(n, UNMEASURED, np.int16)
        onset_sc = None
        if k.opt_index >= 0 and opt["scale_code"] != UNMEASURED:
            raw_sc[k.opt_index] = opt["scale_code"]
            onset_sc = np.full(n, -1, np.int64)
            onset_sc[k.opt_index] = self.dec_start
        out["scaler"] = (raw_sc, onset_sc)
        if self.scaler_active:
            self._scaler_origin(step, row, opt)
        self.prev_opt_step = step
        return out

    # ------------------------------------------------------------- gradients
    def _grad(self, row, conf):
        t, k = self.t, self.kinds
        g = row[:, _M["grad_norm"]]
        w = row[:, _M["weight_norm"]]
        nonfin_n = row[:, _M["grad_nonfinite"]]
        missing = row[:, _M["grad_missing"]]
        mod = k.is_mod
        # a NaN norm of gradients that all arrived is a NaN gradient, not a gap
        nonfinite = mod & ((nonfin_n > 0) | np.isinf(g) | (np.isnan(g) & (missing == 0)))
        origin, received, measured = self._backward(row, nonfinite)
        if measured:
            # with the output gradients measured, a parameterless module can
            # be where the non-finite gradient is born (a bad custom backward)
            nonfinite = nonfinite | origin
        self.has_param |= mod & np.isfinite(missing)
        # no gradient although the module ran in this forward pass (a module
        # skipped by conditional computation, e.g. an unrouted expert, is not
        # expected to get one)
        ran = np.isfinite(row[:, _M["act_nonfinite"]]) | np.isfinite(row[:, _M["act_mean"]])
        # ... and none of its parameters got one (an unused extra parameter
        # of a module that otherwise learns is a DDP nuisance, not a failure)
        no_grad = mod & (missing > 0) & np.isnan(g) & ran & ~nonfinite
        fin = mod & np.isfinite(g) & ~no_grad & ~nonfinite
        raw = np.full(self.n, UNMEASURED, np.int16)
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
            ratio = np.where(conf == _S["vanishing"], t.vanish_exit_ratio, t.vanish_ratio)
            with np.errstate(invalid="ignore"):
                low_g = (down_g > 0) & (g < ratio * down_g)
                low_r = ~np.isfinite(rel) | ~(down_r > 0) | (rel < ratio * down_r)
            low = fin & low_g & low_r
            # gradients vanish on their way to the input: the vanishing layers
            # are a prefix of the network. A layer inside a residual branch
            # whose last BatchNorm is zero-initialised has a tiny gradient
            # while the layers before it get theirs through the skip path.
            prefix = np.logical_and.accumulate(np.where(fin, low, True))
            raw[low & prefix] = _S["vanishing"]
        else:
            low = np.zeros(self.n, dtype=bool)
        # exploding, against the other layers at this step (born exploding);
        # the reference leaves out the layers whose gradient is tiny
        exploding = np.zeros(self.n, dtype=bool)
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
        hist = fin & (self.g_cnt >= t.history_min)
        with np.errstate(invalid="ignore", over="ignore"):
            growth = hist & (g > t.explode_growth * 10.0 ** self.g_ema) & (g > t.explode_vs_max * self.g_max)
        exploding |= growth
        raw[exploding & fin] = _S["exploding"]
        raw[no_grad] = _S["no_gradient"]
        if self.scaler_active:
            # with a GradScaler, inf/NaN gradients are how the scaler finds its
            # scale: a skipped step, judged by the scaler aspect, not here
            raw[nonfinite] = UNMEASURED
        else:
            raw[nonfinite] = _S["nonfinite"]
        # running references from healthy values only
        ok = (raw == HEALTHY) & (g > 0)
        if ok.any():
            lg = _log10(g[ok])
            prev = self.g_ema[ok]
            self.g_ema[ok] = np.where(np.isnan(prev), lg, prev + t.ema_alpha * (lg - prev))
            self.g_max[ok] = np.maximum(self.g_max[ok], g[ok])
            self.g_cnt[ok] += 1
        return raw

    def _backward(self, row, param_bad):
        """Where non-finite gradients are born in backward, from gout_nonfinite.

        The origin is a module whose output gradient is finite while the
        gradients it produces are not: its own parameters' gradients, or the
        gradient it passed on to its input (the output gradient of the module
        before it in forward order). Returns (origin, received, measured):
        bool [L] rows where it is born, bool [L] rows whose output gradient
        was already non-finite, and whether the column was measured at all
        (NaN/absent in older logs: the caller falls back to the deepest layer
        with non-finite parameter gradients).
        """
        k = self.kinds
        mod = k.is_mod
        gout = row[:, _M["gout_nonfinite"]]
        fin = mod & (gout == 0)
        bad = mod & (gout > 0)
        measured = bool(fin.any() or bad.any())
        prev_bad = np.zeros(self.n, dtype=bool)
        prev_bad[1:] = bad[:-1]
        origin = fin & (param_bad | prev_bad) if measured else np.zeros(self.n, dtype=bool)
        self.bwd_origin = origin
        self.bwd_received = bad
        self.bwd_measured = measured
        nf = row[:, _M["act_nonfinite"]]
        self.fwd_nonfinite = bool(((mod | k.is_loss | k.is_input) & (nf > 0)).any())
        return origin, bad, measured

    # ----------------------------------------------------------- activations
    def _forward_nonfinite(self, row):
        """Non-finite outputs: checked at every step (a flag from the sum)."""
        nf = row[:, _M["act_nonfinite"]]
        raw = np.full(self.n, UNMEASURED, np.int16)
        mod = self.kinds.is_mod
        raw[mod & (nf == 0)] = HEALTHY
        raw[mod & (nf > 0)] = _S["nonfinite"]
        return raw

    def _act(self, row, conf):
        t, k = self.t, self.kinds
        mean = row[:, _M["act_mean"]]
        std = row[:, _M["act_std"]]
        absmax = row[:, _M["act_absmax"]]
        dead_f = row[:, _M["act_dead_frac"]]
        in_dead = row[:, _M["in_dead_frac"]]
        sat_f = row[:, _M["act_sat_frac"]]
        mod = k.is_mod
        measured = mod & (np.isfinite(std) | np.isfinite(absmax) | np.isfinite(dead_f)
                          | np.isfinite(sat_f) | np.isfinite(in_dead))
        raw = np.full(self.n, UNMEASURED, np.int16)
        raw[measured] = HEALTHY
        with np.errstate(invalid="ignore", over="ignore"):
            rms = np.sqrt(mean * mean + std * std)
            # collapsed: one constant value (not all zeros: that is dead)
            collapsed = measured & (absmax > 0) & (std <= t.collapse_rel * absmax)
            sat_thr = np.where(conf == _S["saturated"], t.sat_exit_frac, t.sat_frac)
            # a rectifier's zeros (ReLU6's lower end) are its dead side, judged
            # by the dead fraction; only the top end counts as saturation
            zero_f = row[:, _M["act_zero_frac"]]
            sat_eff = np.where(np.isfinite(dead_f) & np.isfinite(zero_f), sat_f - zero_f, sat_f)
            saturated = measured & (sat_eff >= sat_thr)
            dead_thr = np.where(conf == _S["dead"], t.dead_exit_frac, t.dead_frac)
            # a functional activation (torch.relu in forward) shows as the next
            # module's dead input; the units belong to the previous module (the
            # one whose pre-activations went negative) when that module is not
            # an activation module itself (those report their own dead units)
            eff = dead_f.copy()
            via = np.zeros(self.n, dtype=bool)
            via[:-1] = k.prev_is_mod[1:] & np.isnan(dead_f[:-1]) & np.isfinite(in_dead[1:])
            eff[:-1] = np.where(via[:-1], in_dead[1:], eff[:-1])
            self.dead_eff, self.dead_via = eff, via
            dead = measured & ((eff >= dead_thr) | (absmax == 0))
            # the output activation (no layer with parameters after it) of a
            # model that learns becomes confident: sigmoid outputs near 0/1 for
            # BCE are success, not failure. There only a layer born saturated
            # or dead (never once healthy) counts.
            out_ok = self._output_rows() & (self.a_cnt > 0)
            saturated &= ~out_ok
            dead &= ~out_ok
            # exploding: amplifies its input (the previous row) a hundredfold,
            # or grew a hundredfold over its own history, beyond a floor
            rms_prev = np.full(self.n, np.nan)
            rms_prev[1:] = rms[:-1]
            big = measured & (rms > t.act_explode_floor)
            amp = big & (rms_prev > 0) & (rms > t.act_explode_ratio * rms_prev)
            # ... or the network amplified the batch a thousandfold by here
            # (a large initialisation everywhere compounds layer by layer)
            cum = np.zeros(self.n, dtype=bool)
            if k.input_index >= 0:
                rms_in = rms[k.input_index]
                cum = big & (rms_in > 0) & (rms > t.act_explode_ratio * t.act_explode_vs_max * rms_in)
            # compounded over layers, not this one alone (kept from the last
            # measurement: an explosion may be confirmed once the output is NaN)
            self.act_cumulative = np.where(measured, cum & ~amp, self.act_cumulative)
            amp |= cum
            hist = big & (self.a_cnt >= t.history_min)
            growth = hist & (rms > t.act_explode_ratio * 10.0 ** self.a_ema) & (rms > t.act_explode_vs_max * self.a_max)
            # the model's output layer (the last one with parameters) grows to
            # the scale of its targets (a regression onto values ~1e3) while
            # the loss falls: learning, not an explosion. Only once it was
            # healthy (born exploding still counts) and while the recent
            # losses are below the first one (a divergence raises the loss).
            fit = self._head_row() & (self.a_cnt > 0) & ~cum
            if fit.any() and self._loss_below_first():
                amp &= ~fit
                growth &= ~fit
        raw[collapsed] = _S["collapsed"]
        raw[saturated] = _S["saturated"]
        raw[dead] = _S["dead"]
        raw[amp | growth] = _S["act_exploding"]
        ok = (raw == HEALTHY) & (rms > 0) & np.isfinite(rms)
        if ok.any():
            lr_ = _log10(rms[ok])
            prev = self.a_ema[ok]
            self.a_ema[ok] = np.where(np.isnan(prev), lr_, prev + t.ema_alpha * (lr_ - prev))
            self.a_max[ok] = np.maximum(self.a_max[ok], rms[ok])
            self.a_cnt[ok] += 1
        self.act_rms = rms
        return raw

    def _head_row(self):
        """The last module with parameters before <loss> (the model's output layer)."""
        k = self.kinds
        out = np.zeros(self.n, dtype=bool)
        idx = np.flatnonzero(self.has_param & k.is_mod)
        if len(idx) and k.loss_index >= 0:
            last = idx[idx < k.loss_index]
            if len(last):
                out[last[-1]] = True
        return out

    def _loss_below_first(self) -> bool:
        """The recent losses' median is below the (finite) first loss."""
        if self.first_loss is None or not math.isfinite(self.first_loss[1]) or len(self.loss_hist) < self.t.loss_history_min:
            return False
        med = self.loss_hist.median()
        return bool(math.isfinite(med) and med < self.first_loss[1])

    def _output_rows(self):
        """Module rows after the last module with parameters (before <loss>)."""
        k = self.kinds
        idx = np.flatnonzero(self.has_param & k.is_mod)
        out = np.zeros(self.n, dtype=bool)
        if len(idx) and k.loss_index >= 0:
            last = idx[idx < k.loss_index]
            if len(last):
                out[last[-1] + 1:k.loss_index] = True
        return out & k.is_mod

    # --------------------------------------------------------------- weights
    def _weight(self, step, row, grad_raw, opt):
        k = self.kinds
        ur = row[:, _M["update_ratio"]]
        w = row[:, _M["weight_norm"]]
        mod = k.is_mod
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
        raw = np.full(self.n, UNMEASURED, np.int16)
        lr = opt["lr"]
        if not (lr > 0 or math.isnan(lr)) or opt["skipped"]:
            return raw  # nothing may move at this step
        n_moved = int(moved.sum())
        if n_moved == 0:
            return raw  # e.g. a skipped step: no layer moved
        raw[moved] = HEALTHY
        # frozen: has a healthy gradient but does not move while others do
        frozen = still & (grad_raw == HEALTHY) & (row[:, _M["grad_norm"]] > 0)
        raw[frozen] = _S["frozen"]
        # learning-rate evidence for the root cause: most layers moved far
        if ur_ok.sum() >= 2:
            frac_high = float(np.mean(ur[ur_ok] > self.t.update_ratio_high))
            if frac_high >= 0.5:
                self.high_update_steps.append((step, float(lr)))
        return raw

    # ---------------------------------------------------------------- <input>
    def _input(self, r):
        t = self.t
        std, absmax, nonfin = r[_M["act_std"]], r[_M["act_absmax"]], r[_M["act_nonfinite"]]
        mean = r[_M["act_mean"]]
        self.input_reason = None
        if nonfin > 0:
            self.input_reason = "nonfinite"
            return _S["data_anomaly"]
        if not (np.isfinite(std) and np.isfinite(absmax) and np.isfinite(mean)):
            return UNMEASURED
        if (absmax > 0 and std <= t.collapse_rel * absmax) or (absmax == 0 and std == 0):
            self.input_reason = "constant"
            return _S["data_anomaly"]
        ls, lm = _log10(max(std, 1e-30)), _log10(max(absmax, 1e-30))
        if len(self.in_log_std) >= t.input_history_min:
            # robust references: medians of recent healthy batches
            lim = math.log10(t.input_ratio)
            ds = ls - self.in_log_std.median()
            dm = lm - self.in_log_max.median()
            typical_std = 10.0 ** self.in_log_std.median()
            dmean = abs(mean - self.in_mean.median()) / typical_std
            if abs(ds) > lim or abs(dm) > lim or dmean > t.input_ratio:
                self.input_reason = "scale_down" if max(ds, dm) < -lim else "scale_up"
                return _S["data_anomaly"]
        self.in_log_std.append(ls)
        self.in_log_max.append(lm)
        self.in_mean.append(mean)
        if math.isnan(self.input_rms0):
            self.input_rms0 = math.sqrt(mean * mean + std * std)
        return HEALTHY

    # ----------------------------------------------------------------- <loss>
    def _loss(self, step, r, opt, out, confirmed):
        t, i = self.t, self.kinds.loss_index
        v = float(r[_M["value"]])
        nonfin = r[_M["act_nonfinite"]] > 0 or math.isinf(v)
        raw_loss = out["loss"][0]
        if nonfin:
            raw_loss[i] = _S["nonfinite"]
            return
        if math.isnan(v):
            return
        # initial loss of K-class cross-entropy (one check, at the first loss
        # of a run that starts at step 0: a resumed run is not at its init)
        if not self.init_done:
            self.init_done = True
            self.first_loss = (step, v)
            k = self.num_classes
            if k is not None and k >= 2 and step == 0:
                lnk = math.log(k)
                tol = max(t.initial_loss_abs, t.initial_loss_rel * lnk)
                # far above: confident wrong logits. Below ln K is what a
                # pretrained model gives; only a negative value is impossible
                bad = v > lnk + tol or v < 0
                out["init"][0][i] = _S["initial_loss"] if bad else HEALTHY
        # spike: far above both the maximum and the median of recent losses
        hist = self.loss_hist
        spike = False
        if len(hist) >= t.loss_history_min and self.loss_min > 0:  # ratios need positive losses
            spike = v > t.spike_ratio * hist.max() and v > t.spike_median * hist.median()
        raw_loss[i] = _S["loss_spike"] if spike else HEALTHY
        if not spike:
            hist.append(v)
            self.loss_min = min(self.loss_min, v)
        # plateau: judged on medians of blocks of ``_PLATEAU_BLOCK`` losses
        # (steps with a learning rate > 0; a frozen run is not stuck)
        lr = opt["lr"]
        if lr > 0 or math.isnan(lr):
            if self.plateau_first_step is None:
                self.plateau_first_step = step
            if not self.plateau_block:
                self.plateau_block_step = step
            self.plateau_block.append(v)
            self.plateau_recent.append(v)
            self.plateau_steps += 1
            if len(self.plateau_block) == _PLATEAU_BLOCK:
                self.plateau_blocks.append(float(np.median(self.plateau_block)))
                self.plateau_block_steps.append(self.plateau_block_step)
                self.plateau_block = []
                per = max(1, t.plateau_window // _PLATEAU_BLOCK)
                if len(self.plateau_blocks) >= per:
                    # the level: the median of the last plateau_window losses
                    # (kept once a block: the rule reads them all at each check)
                    self.plateau_levels.append(float(np.median(self.plateau_recent.values())))
                    self.plateau_level_steps.append(self.plateau_block_steps[-per])
                # judged once a block: a plateau is a matter of hundreds of steps
                self.plateau_code = self._plateau_code(
                    confirmed["plateau"][i] == _S["loss_plateau"], final=False)
        code = self.plateau_code
        if code is not None:
            out["plateau"][0][i] = code
            if code == _S["loss_plateau"]:
                onset = np.full(self.n, -1, np.int64)
                onset[i] = self.plateau_onset
                out["plateau"] = (out["plateau"][0], onset)

    def _plateau_code(self, in_plateau: bool, final: bool):
        """Plateau state from the loss so far; None while undecidable.

        A plateau is a flat stretch of the loss that reaches the present: the
        longest recent span of block medians whose last level (the median of
        ``plateau_window`` losses) is not ``plateau_min_drop`` below the level
        at the span's start, in which no level fell further than that (plus
        three times the levels' noise) on the way, nor rose above
        ``1 + plateau_max_rise`` times it (a diverging loss is not a plateau:
        the spike and explosion rules judge it). Its onset is where the span starts, i.e. where the
        loss stopped falling, never before a substantial fall. It is a
        failure only at a level that says so: the span starts with the run
        (the loss never fell; runs starting at step 0 only, since a resumed
        run may start converged), or, with K classes known, it sits at (or
        above) chance level ln K. A loss that fell and then flattened below
        chance is a converged run, not a plateau.
        """
        t = self.t
        need = t.plateau_min_steps if not final else max(2 * t.plateau_window, t.plateau_min_steps // 2)
        per = max(1, t.plateau_window // _PLATEAU_BLOCK)  # blocks per level
        blocks = np.asarray(self.plateau_blocks)
        lev = np.asarray(self.plateau_levels)
        if self.plateau_steps < need or len(lev) == 0:
            return None
        # hysteresis on values: leaving takes three times the drop; a short run
        # (decided at its end) must be twice as flat
        drop = t.plateau_min_drop * (3.0 if in_plateau else 1.0) * (0.5 if final else 1.0)
        tol = np.abs(lev)
        # the levels' own noise (small noisy batches): from the differences of
        # consecutive block medians, robust to a trend; a dip or a rise inside
        # the span counts only beyond 3 sigma of it
        noise = 0.0
        if len(blocks) >= 3:
            noise = 3.0 * 1.4826 * float(np.median(np.abs(np.diff(blocks)))) / math.sqrt(2.0 * per)
        suf_min = np.minimum.accumulate(lev[::-1])[::-1]
        suf_max = np.maximum.accumulate(lev[::-1])[::-1]
        flat_from = (
            (lev[-1] >= lev - drop * tol)  # it has not fallen since (as a whole) ...
            & (suf_min >= lev - drop * tol - noise)  # ... nor on the way, then rose back
            & (suf_max <= lev + t.plateau_max_rise * tol + noise)  # nor diverged
        )
        # the earliest start of a flat span reaching the present (every later
        # level of it is within the band of its first level)
        starts = np.flatnonzero(flat_from)
        j = int(starts[0]) if len(starts) else len(lev) - 1
        span = (len(lev) - 1 - j + per) * _PLATEAU_BLOCK
        recent = float(lev[-1])
        self.plateau_level_before = float(lev[j])
        self.plateau_level = recent
        self.plateau_onset = int(self.plateau_level_steps[j])
        if span < need:
            return HEALTHY
        # never fell: the flat span is the whole run (from step 0)
        flat = j == 0 and self.first_step == 0
        k = self.num_classes
        # K known: stuck at (or above) the chance level ln K
        chance = k is not None and k >= 2 and recent > (1.0 - drop) * math.log(k)
        self.plateau_reason = "chance" if chance else "flat"
        return _S["loss_plateau"] if (flat or chance) else HEALTHY

    # ------------------------------------------------------------ <optimizer>
    def _optimizer(self, step, row):
        """Learning rate and GradScaler bookkeeping; the scaler's raw state."""
        t, i = self.t, self.kinds.opt_index
        res = {"lr": math.nan, "scale_code": UNMEASURED, "skipped": False}
        if i < 0:
            return res
        lr = float(row[i, _M["value"]])
        scale = float(row[i, _M["scale"]])
        res["lr"] = lr
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
            self.lr_max = max(self.lr_max, lr)
        self.scaler_active = np.isfinite(scale)
        if not self.scaler_active:
            return res
        prev = self.scale_prev
        self.scale_prev = scale

        self.scale_max = max(self.scale_max, scale)
        if math.isnan(prev):
            res["scale_code"] = HEALTHY
            return res
        if scale < prev:
            # the scale is recorded before scaler.update(): a decrease seen now
            # means the previous step found inf/NaN and was skipped
            res["skipped"] = True
            if self.dec_run == 0:
                self.dec_start = self.prev_opt_step
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
        res["scale_code"] = _S["scaler_collapse"] if collapsed else HEALTHY
        return res

    def _scaler_origin(self, step, row, opt):
        """Where this step's inf/NaN first appears (for scaler back-offs)."""
        k = self.kinds
        self.last_origin = None
        fwd = np.flatnonzero((k.is_mod | k.is_loss) & (row[:, _M["act_nonfinite"]] > 0))
        if len(fwd):
            self.last_origin = ("forward", int(fwd[0]))
        else:
            g = row[:, _M["grad_norm"]]
            bad = (row[:, _M["grad_nonfinite"]] > 0) | np.isinf(g) | (np.isnan(g) & (row[:, _M["grad_missing"]] == 0))
            # the first module in backward order where it is born (_backward,
            # computed by _grad this step), else the deepest non-finite one
            bwd = np.flatnonzero(self.bwd_origin) if self.bwd_measured else np.zeros(0, np.int64)
            if not len(bwd):
                bwd = np.flatnonzero(k.is_mod & bad)
            if len(bwd):
                self.last_origin = ("backward", int(bwd[-1]))
        if opt["skipped"] and self.dec_origin is None:
            self.dec_origin = self.last_origin

    # ------------------------------------------------------------------ end
    def final_plateau(self, in_plateau: bool):
        """Plateau decision at the end of a run shorter than plateau_min_steps."""
        return self._plateau_code(in_plateau, final=True)


class _Window:
    """The last ``size`` values of one scalar series, with cheap robust stats.

    The median and maximum are recomputed every ``refresh`` appends (a
    reference need not move at every step; a numpy median costs ~20 us); in
    between, the maximum only grows, which errs on the quiet side.
    """

    def __init__(self, size: int, refresh: int = 8):
        self._a = np.empty(max(1, size))
        self._n = 0  # values appended so far
        self._refresh = refresh
        self._med = math.nan
        self._max = -math.inf
        self._stale = 0

    def __len__(self) -> int:
        return min(self._n, len(self._a))

    def append(self, v: float) -> None:
        self._a[self._n % len(self._a)] = v
        self._n += 1
        self._max = max(self._max, v)
        self._stale += 1
        if self._n <= 2 * self._refresh or self._stale >= self._refresh:
            self._recompute()

    def _recompute(self) -> None:
        # a sort of <= 64 values is several times cheaper than np.median
        vals = np.sort(self._a[: len(self)])
        n = len(vals)
        self._med = float(vals[n // 2] if n % 2 else 0.5 * (vals[n // 2 - 1] + vals[n // 2]))
        self._max = float(vals[-1])
        self._stale = 0

    def median(self) -> float:
        return self._med

    def max(self) -> float:
        return self._max

    def values(self) -> np.ndarray:
        """The values held (oldest first is not guaranteed)."""
        return self._a[: len(self)]


def _strict_suffix_max(a: np.ndarray) -> np.ndarray:
    """out[i] = max(a[i+1:]) (-inf for the last element)."""
    out = np.full(len(a), -np.inf)
    if len(a) > 1:
        out[:-1] = np.maximum.accumulate(a[::-1])[::-1][1:]
    return out
