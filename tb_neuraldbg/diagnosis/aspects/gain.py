"""The gain aspect: where an explosion or a vanishing begins, judged by what
each module does to the signal (``fwd_gain``) and to the gradient
(``bwd_gain``), with or without parameters of its own.

A module whose gain departs by ``GAIN_DEPARTURE`` from the healthy bound of
its type *and* from the median gain of the network at that step is where
the signal starts to explode or die: the first such module in forward order
for the forward gain, in backward order for the backward gain. A backward
gain counts only where the gradient the module passes on is itself that far
from every gradient the modules after it receive (``gout_norm``): a module
whose input is also a residual's skip path passes on the skip's gradient,
and a zero-initialised branch after it gives it a huge gain that is no
explosion (tests/scenarios/healthy.py's ResNet with zero-initialised last
BatchNorms).
"""

from __future__ import annotations

import math

import numpy as np

from ..explain import family
from ..thresholds import Thresholds
from ._base import HEALTHY, METRIC, STATE, Aspect, RowKinds, blank

__all__ = ["Gain", "GAIN_DEPARTURE", "GAIN_BOUNDS", "MIN_MODULES", "containers", "output_rows"]

#: How far (a factor) a gain must be beyond its type's healthy bound and the
#: network's median to mark where an explosion or vanishing begins. On the
#: healthy scenarios (tests/scenarios) the judged modules come within 5.5x
#: of both at most (forward: a U-Net decoder conv), 5.1x (backward, above)
#: and 4.5x (backward, below); a Linear initialised 20 times too large
#: departs 12x at PyTorch's default initialisation, a backward that
#: multiplies by 1000 about 1000x (tests/test_gain_units.py).
GAIN_DEPARTURE = 10.0

#: The healthy (low, high) bounds of each family's gains (explain.family).
#: None: that side is not judged here: a rectifier or a bounded activation
#: whose gain falls is dead or saturated (the activation aspect's states), a
#: pooling layer averages the spread away, and a Linear or Conv initialised
#: to zero on purpose (adaLN-Zero, a zero head) starts with no forward gain
#: (a module of the user's own type is judged on both sides: a scale of
#: ~0 there is a collapse; a ReZero block is a container, judged through
#: its children).
#: Normalisation layers have a gain of 1/std of their input whatever their
#: health (judged by their output instead), embeddings have no input spread
#: and containers are judged through their children: not judged.
GAIN_BOUNDS = {
    "rectifier": ((None, 1.0), (None, 1.0)),
    "smooth": ((None, 1.0), (None, 1.0)),
    "bounded": ((None, 1.0), (None, 1.0)),
    "recurrent": ((None, 1.0), (None, 1.0)),
    "affine": ((None, 1.0), (0.5, 1.0)),
    "attention": ((None, 1.0), (0.5, 1.0)),
    "other": ((0.5, 1.0), (0.5, 1.0)),
}
_NOT_JUDGED = ("norm", "embedding", "pseudo")
_DROPOUT = ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout")
_POOLING_PREFIXES = ("MaxPool", "AvgPool", "AdaptiveAvgPool", "AdaptiveMaxPool", "LPPool", "FractionalMaxPool")

#: A network's median gain needs this many judged modules to mean anything.
MIN_MODULES = 3

_M = METRIC


def containers(names) -> np.ndarray:
    """bool [L]: rows whose module holds other rows (``a`` of ``a.b``)."""
    prefixes = {n[:i] for n in names for i in range(len(n)) if n[i] == "."}
    return np.array([n in prefixes for n in names], dtype=bool).reshape(len(names))


def output_rows(has_param, kinds: RowKinds) -> np.ndarray:
    """bool [L]: the model's output layer (its last module with parameters
    before ``<loss>``) and the modules after it: their output's scale is the
    targets' (a regression to values of 100 has a forward gain of 100)."""
    out = np.zeros(kinds.n, dtype=bool)
    idx = np.flatnonzero(has_param & kinds.is_mod)
    stop = kinds.loss_index if kinds.loss_index >= 0 else kinds.n
    idx = idx[idx < stop]
    if len(idx):
        out[idx[-1]:stop] = True
    return out & kinds.is_mod


def _after(v, reduce) -> np.ndarray:
    """[L]: ``reduce`` (np.fmax or np.fmin) of the positive finite values of
    ``v`` on the rows after each row (NaN where there is none)."""
    ok = np.where(np.isfinite(v) & (v > 0), v, np.nan)
    suffix = reduce.accumulate(ok[::-1])[::-1]  # (fmax/fmin skip NaN)
    return np.concatenate([suffix[1:], [np.nan]])


def _bounds(layer_type: str, direction: int) -> tuple:
    """(low, high) healthy bound of a type's forward (0) or backward (1) gain."""
    if layer_type in _DROPOUT:
        return (None, 1.0 / math.sqrt(1.0 - 0.9))  # 1/sqrt(1-p), up to p = 0.9
    if layer_type.startswith(_POOLING_PREFIXES):
        return (None, 1.5)
    return GAIN_BOUNDS.get(family(layer_type), GAIN_BOUNDS["other"])[direction]


class Gain(Aspect):
    """States of the module rows from their gains: ``gain_fwd`` (explosion
    or collapse of the activations begins here) and ``gain_bwd`` (the
    gradient explodes or vanishes from here), on full-statistics steps."""

    EVIDENCE = {"gain_fwd": ("fwd_gain", None), "gain_bwd": ("bwd_gain", None)}
    _METRIC = {"gain_fwd": "fwd_gain", "gain_bwd": "bwd_gain"}

    def __init__(self, thresholds: Thresholds):
        super().__init__()
        self.t = thresholds
        self.row = None  # the step's row (the evidence of its events)
        self.last = {name: np.zeros(0) for name in self.EVIDENCE}  # each gain's last measured value
        self.before = self.last  # ... as of the step before this one
        self.bounds = np.zeros((2, 2, 0))  # [direction, low/high, L]; NaN: not judged
        self.container = np.zeros(0, dtype=bool)
        self.feeds_bounded = np.zeros(0, dtype=bool)  # (a bounded activation or a normalisation next)
        self.median = {name: math.nan for name in self.EVIDENCE}  # the network's median gain at the step
        # ... of the backward gains at their first measurement, before any
        # update, and the rows it judged: an explosion of the gradient raises
        # the backward gains of the modules it reaches, and must not raise the
        # reference of the module where it starts (a module only judged later,
        # e.g. behind a ReZero gate of 0 at first, makes the first median
        # another network's: tests/scenarios/healthy.py's rezero_branches)
        self.first_bwd = (math.nan, None)
        # the largest |target| of a regression (MSE: target_min/max), last known
        self.target_scale = math.nan

    def grow(self, kinds: RowKinds) -> None:
        super().grow(kinds)
        n = kinds.n
        self.container = containers(kinds.names)
        # A module right before a bounded activation cannot explode the
        # signal: it saturates it, the activation aspect's state (a Linear
        # scaled x30 before a Tanh: tests/scenarios/failures.py's
        # saturated_tanh names the Tanh). Nor can one right before a
        # normalisation layer, which divides its scale away whatever it is
        # (a weight-standardised conv, of gain ~sqrt(fan_in), before its
        # GroupNorm; tests/test_gain_units.py).
        fam = [family(t) for t in kinds.types]
        self.feeds_bounded = np.array([i + 1 < n and kinds.is_mod[i + 1] and fam[i + 1] in ("bounded", "norm")
                                       for i in range(n)], dtype=bool).reshape(n)
        b = np.full((2, 2, n), np.nan)
        for i, t in enumerate(kinds.types):
            if not kinds.is_mod[i] or self.container[i] or family(t) in _NOT_JUDGED:
                continue
            for d in (0, 1):
                lo, hi = _bounds(t, d)
                b[d, :, i] = (np.nan if lo is None else lo, hi)
        self.bounds = b
        for name, last in self.last.items():
            self.last[name] = np.concatenate([last, np.full(n - len(last), np.nan)]) if len(last) < n else last

    def classify(self, row, has_param) -> dict:
        """{"gain_fwd": (raw, None), "gain_bwd": (raw, None)}; ``has_param``:
        bool [L], rows with parameters."""
        self.row = row
        fwd = row[:, _M["fwd_gain"]]
        bwd = row[:, _M["bwd_gain"]]
        if np.isnan(fwd).all() and np.isnan(bwd).all():  # a cheap step (nine in ten): nothing measured
            return {name: (blank(self.kinds.n), None) for name in self.EVIDENCE}
        li = self.kinds.loss_index
        if li >= 0 and np.isfinite(row[li, _M["target_var"]]):
            self.target_scale = float(np.nanmax(np.abs(row[li, [_M["target_min"], _M["target_max"]]])))
        if self.target_scale > GAIN_DEPARTURE:
            # A regression onto targets GAIN_DEPARTURE off unit scale asks the
            # network for that gain: its layers' gains of ~10 are the fit
            # (prices of ~1000 from unit features: ~10 at each of three
            # Linears), not where an explosion begins (tests/test_gain_units.py;
            # the divergence of such a run is judged by the gradients and the
            # loss, and named by the targets' scale: causes/targets.py)
            return {name: (blank(self.kinds.n), None) for name in self.EVIDENCE}
        # the output layer's scale is the targets' (and the loss's: a logit
        # scale is the <loss> aspect's initial loss)
        judged = ~output_rows(has_param, self.kinds)
        gout = row[:, _M["gout_norm"]]
        # The forward gain means something only on the signal's path: a module
        # whose output receives a gradient. Rotary embeddings (LLaMA, GPT-NeoX
        # in tests/test_model_zoo.py) turn the hidden state's dtype and the
        # positions into cos/sin tables under no_grad: no transform of the signal.
        on_path = np.isfinite(gout)
        out = {
            "gain_fwd": (self._judge("gain_fwd", fwd, self.bounds[0], judged & on_path & ~self.feeds_bounded, None,
                                     (STATE["act_exploding"], STATE["collapsed"]), first=True), None),
            "gain_bwd": (self._judge("gain_bwd", bwd, self.bounds[1], judged, gout,
                                     (STATE["exploding"], STATE["vanishing"]), first=False), None),
        }
        self.before = dict(self.last)  # (np.where makes new arrays: no copies needed)
        for name in self.last:
            v = row[:, _M[self._METRIC[name]]]
            self.last[name] = np.where(np.isnan(v), self.last[name], v)
        return out

    def _judge(self, name, g, bounds, allowed, gout, codes, first: bool):
        """Raw states of one gain ``g`` [L]: ``codes`` (high, low) on the
        first departing row (in forward order when ``first``, else in
        backward order), healthy on the other judged rows that measured it."""
        raw = blank(self.kinds.n)
        lo, hi = bounds
        judged = np.isfinite(g) & (g > 0) & ~np.isnan(hi) & allowed
        if judged.sum() < MIN_MODULES:
            return raw
        raw[judged] = HEALTHY
        d = GAIN_DEPARTURE
        med = self.median[name] = float(np.median(g[judged]))
        ref = med
        if gout is not None:
            first, rows = self.first_bwd
            if rows is None:
                self.first_bwd = (med, judged.copy())
            elif len(rows) == len(judged) and not (judged & ~rows).any():
                ref = min(med, first)
        high = judged & (g >= d * hi) & (g >= d * ref)
        low = judged & (g <= lo / d) & (g <= med / d)  # (NaN low bound: never)
        if gout is not None:
            # What the module passes on must itself be far from every
            # gradient the modules after it receive (see the module's
            # docstring): above the largest, or below the smallest.
            above, below = _after(gout, np.fmax), _after(gout, np.fmin)
            passed = g * gout
            # Above: like with like, against what the modules after it pass
            # on where they measured it (the gradient into their inputs), not
            # the loss's own gradient at the output layer: a pool whose
            # backward forgets its 1/L passes on L/sqrt(L) times the norm it
            # receives, while the head before the loss passes on less than it
            # receives (tests/test_diagnosis_backward_jump.py).
            flow = _after(passed, np.fmax)
            above = np.where(np.isnan(flow), above, flow)
            high &= passed >= d * np.where(np.isnan(above), gout, above)
            low &= passed <= np.where(np.isnan(below), gout, below) / d
        for mask, code in zip((high, low), codes):
            rows = np.flatnonzero(mask)
            if len(rows):
                raw[rows[0] if first else rows[-1]] = code
        return raw

    def evidence(self, name: str, code, value, before) -> tuple:
        """The gain itself, and its value at the row's previous measurement."""
        col = _M[self._METRIC[name]]
        now = self.row[:, col] if self.row is not None else value
        return now, self.before[name]

    def event_fields(self, name: str, kind: str, tr, row) -> tuple:
        """The gain as the event's value, and what it is (the message's words)."""
        return tr.value, tr.value_before, {
            "signal": self._METRIC[name], "network_median": self.median[name], "cause": "module_gain"}
