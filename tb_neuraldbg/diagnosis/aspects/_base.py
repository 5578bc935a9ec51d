"""What the aspects share: the row kinds, the aspect interface, running
references and small array helpers.

Everything here is vectorised over rows (layers): the engine runs every
training step on the writer's worker thread.
"""

from __future__ import annotations

import math

import numpy as np

from ...format import metadata
from ..transitions import UNMEASURED

__all__ = ["METRIC", "STATE", "HEALTHY", "UNMEASURED", "RowKinds", "Aspect", "LogTrack", "Window",
           "grow", "blank", "for_good", "log10", "nonfinite_before"]

#: column of each metric in a statistics row
METRIC = metadata.METRIC_INDEX
#: code of each state
STATE = metadata.STATE_CODE
HEALTHY = STATE["healthy"]


class RowKinds:
    """Which rows are modules and which are the pseudo-layers."""

    def __init__(self, layers):
        names = [str(l.get("name", "")) for l in layers]
        self.names = names
        self.types = [str(l.get("type", "")) for l in layers]
        #: each row's parameters' dtype ("bfloat16", "float32"; "": unknown)
        self.dtypes = [l.get("dtype") if isinstance(l.get("dtype"), str) else "" for l in layers]
        n = len(names)
        self.n = n
        self.is_input = np.array([x == metadata.PSEUDO_INPUT for x in names], dtype=bool).reshape(n)
        self.is_loss = np.array([x == metadata.PSEUDO_LOSS for x in names], dtype=bool).reshape(n)
        self.is_opt = np.array([x == metadata.PSEUDO_OPTIMIZER for x in names], dtype=bool).reshape(n)
        self.is_mod = ~(self.is_input | self.is_loss | self.is_opt)
        #: row indices of the modules, in forward order
        self.module_rows = tuple(int(i) for i in np.flatnonzero(self.is_mod))
        # the previous row in forward order feeds the in_* statistics of a
        # module; the batch itself (<input>) is not an activation
        prev_is_mod = np.zeros(n, dtype=bool)
        prev_is_mod[1:] = self.is_mod[:-1]
        self.prev_is_mod = prev_is_mod
        self.input_index = int(np.flatnonzero(self.is_input)[0]) if self.is_input.any() else -1
        self.loss_index = int(np.flatnonzero(self.is_loss)[0]) if self.is_loss.any() else -1
        self.opt_index = int(np.flatnonzero(self.is_opt)[0]) if self.is_opt.any() else -1
        #: what the criterion applies to its input itself ("softmax", "sigmoid"; None: unknown)
        self.squash = layers[self.loss_index].get("squash") if self.loss_index >= 0 else None
        #: the domain of the criterion's targets ("probabilities": each in [0, 1]; None: unknown)
        self.targets = layers[self.loss_index].get("targets") if self.loss_index >= 0 else None


class Aspect:
    """One aspect of the rows, with its own state.

    An aspect classifies one or more *hysteresis aspects* (the names in
    ``EVIDENCE``, each confirmed separately by the engine): its ``classify``
    returns {name: (raw int16 [L], onset int64 [L] | None)}, its own inputs
    being plain values the classifier passes. It also gives the extra fields
    of its events and may replace their evidence.
    """

    #: hysteresis aspect -> (metric its events report by default, the metric
    #: of its non-finite state or None for the default)
    EVIDENCE: dict = {}
    #: hysteresis aspects decided only at a run's end (its ``final``), over the
    #: whole run: the engine confirms such a decision at once
    FINAL: tuple = ()

    def __init__(self):
        self.kinds = RowKinds([])

    def grow(self, kinds: RowKinds) -> None:
        """Extend to ``kinds.n`` rows (the row list only grows)."""
        self.kinds = kinds

    def event_fields(self, name: str, kind: str, tr, row) -> tuple:
        """(value, value_before, extra) of an event of ``name`` (a Transition
        ``tr`` of event kind ``kind``, confirmed at the step of ``row``)."""
        return tr.value, tr.value_before, {}

    def evidence(self, name: str, code, value, before) -> tuple:
        """The evidence (value, before) [L] of the state ``code`` [L] of each row."""
        return value, before


class LogTrack:
    """A per-row running reference of a magnitude, fed with healthy values only
    so that a failure does not drag its own reference: the exponential average
    of its log10, its maximum and how many values fed it."""

    def __init__(self, alpha: float):
        self.alpha = alpha
        self.ema = np.zeros(0)
        self.max = np.zeros(0)
        self.count = np.zeros(0, np.int64)

    def grow(self, n: int) -> None:
        """Extend to ``n`` rows."""
        self.ema = grow(self.ema, n, np.nan)
        self.max = grow(self.max, n, 0.0)
        self.count = grow(self.count, n, 0)

    def grew(self, x, min_count: int, vs_ema: float, vs_max: float):
        """bool [L]: ``x`` is above ``vs_ema`` x its average and ``vs_max`` x its
        maximum, on rows with at least ``min_count`` values of history."""
        return (self.count >= min_count) & (x > vs_ema * 10.0 ** self.ema) & (x > vs_max * self.max)

    def feed(self, ok, x) -> None:
        """Add the values ``x[ok]`` (positive, finite) to the references."""
        if ok.any():
            # whole rows, kept where not ok: fewer calls than indexing by ok
            # (the same arithmetic on the rows that are)
            lg = log10(x)
            prev = self.ema
            self.ema = np.where(ok, np.where(np.isnan(prev), lg, prev + self.alpha * (lg - prev)), prev)
            self.max = np.where(ok, np.maximum(self.max, x), self.max)
            self.count += ok


class Window:
    """The last ``size`` values of one scalar series, with cheap robust stats.

    The median and maximum are recomputed every ``refresh`` appends (a
    reference need not move at every step, and a numpy median is not free); in
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
        """Add a value (the oldest one drops out once full)."""
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
        """The median of the values held (as of the last refresh)."""
        return self._med

    def max(self) -> float:
        """The maximum of the values held (at least that of the last refresh)."""
        return self._max

    def values(self) -> np.ndarray:
        """The values held (oldest first is not guaranteed)."""
        return self._a[: len(self)]


def grow(a: np.ndarray, n: int, fill) -> np.ndarray:
    """``a`` extended to ``n`` elements with ``fill``."""
    k = n - len(a)
    return a if k <= 0 else np.concatenate([a, np.full(k, fill, a.dtype)])


def for_good(step, since, start, window):
    """Whether a change that began at ``since`` is for good at ``step``: it
    held for ``window`` steps and for at least as long as the row ran before
    it (from ``start``), so that a schedule annealing to 0 at a run's end or
    a classifier passing through its prior is not one (``weight.Moves``,
    ``samples.Samples``; scalars or arrays)."""
    return step - since >= np.maximum(window, since - start)


def blank(n: int) -> np.ndarray:
    """A raw-state array of ``n`` rows, all unmeasured (a new array)."""
    global _BLANK
    if len(_BLANK) < n:  # (a copy of a slice: 5x cheaper than np.full, called ~15 times a step)
        _BLANK = np.full(max(n, 2 * len(_BLANK)), UNMEASURED, np.int16)
    return _BLANK[:n].copy()


_BLANK = np.full(1024, UNMEASURED, np.int16)


def log10(x):
    """np.log10 without warnings (log10(0) is -inf)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log10(x)


def nonfinite_before(row: np.ndarray, i: int) -> int:
    """The row before ``i`` in forward order (the previous module, or <input>)
    when its output is already non-finite (propagated, not born), else -1."""
    return i - 1 if i > 0 and row[i - 1, METRIC["act_nonfinite"]] > 0 else -1
