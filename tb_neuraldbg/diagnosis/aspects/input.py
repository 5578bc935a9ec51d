"""The ``<input>`` aspect: data anomalies of the batch."""

from __future__ import annotations

import math

import numpy as np

from ..thresholds import Thresholds
from ._base import HEALTHY, METRIC, STATE, UNMEASURED, Aspect, Window, blank, log10

__all__ = ["Input"]

_M = METRIC


class Input(Aspect):
    """The batch against the recent healthy ones (hysteresis aspect ``input``):
    non-finite, constant, or far off in scale or mean.

    It also keeps the RMS of the first healthy batch (for the root cause:
    unnormalised inputs), unless the batch is of an integer dtype (token ids,
    indices: not features), and whether it holds only integers.
    """

    EVIDENCE = {"input": ("act_absmax", None)}

    def __init__(self, thresholds: Thresholds):
        super().__init__()
        self.t = thresholds
        # recent healthy batches: log10 std, log10 max|x|, mean
        self.log_std = Window(thresholds.input_window)
        self.log_max = Window(thresholds.input_window)
        self.mean = Window(thresholds.input_window)
        self.rms0 = math.nan  # scale of the first batch (NaN for integer ids: not features)
        self.absmax0 = math.nan  # its max |x|
        # the first batch holds integers: 1 by its dtype (ids, indices), 0.5
        # as floats (pixel values, counts, or ids: said, still judged), NaN unknown
        self.integers = math.nan
        self.reason = None  # of this step's anomaly: "nonfinite", "constant", "scale_up", "scale_down"

    def classify(self, row) -> dict:
        """{"input": (raw, None)}: the state of the <input> row."""
        raw = blank(self.kinds.n)
        i = self.kinds.input_index
        if i >= 0:
            raw[i] = self._batch(row[i])
        return {"input": (raw, None)}

    def _batch(self, r):
        t = self.t
        std, absmax, nonfin = r[_M["act_std"]], r[_M["act_absmax"]], r[_M["act_nonfinite"]]
        mean = r[_M["act_mean"]]
        self.reason = None
        if nonfin > 0:
            self.reason = "nonfinite"
            return STATE["data_anomaly"]
        if not (np.isfinite(std) and np.isfinite(absmax) and np.isfinite(mean)):
            return UNMEASURED
        if (absmax > 0 and std <= t.collapse_rel * absmax) or (absmax == 0 and std == 0):
            self.reason = "constant"
            return STATE["data_anomaly"]
        ls, lm = log10(max(std, 1e-30)), log10(max(absmax, 1e-30))
        if len(self.log_std) >= t.input_history_min:
            # robust references: medians of recent healthy batches
            lim = math.log10(t.input_ratio)
            ds = ls - self.log_std.median()
            dm = lm - self.log_max.median()
            typical_std = 10.0 ** self.log_std.median()
            dmean = abs(mean - self.mean.median()) / typical_std
            if abs(ds) > lim or abs(dm) > lim or dmean > t.input_ratio:
                self.reason = "scale_down" if max(ds, dm) < -lim else "scale_up"
                return STATE["data_anomaly"]
        self.log_std.append(ls)
        self.log_max.append(lm)
        self.mean.append(mean)
        if math.isnan(self.rms0) and math.isnan(self.absmax0):
            self.integers = float(r[_M["input_integers"]])
            self.absmax0 = float(absmax)
            if self.integers != 1.0:  # (token ids and indices have no scale to normalise)
                self.rms0 = math.sqrt(mean * mean + std * std)
        return HEALTHY

    def event_fields(self, name, kind, tr, row):
        extra = {}
        if tr.to_code != HEALTHY:
            extra["reason"] = self.reason
            extra["std"] = float(row[tr.index, _M["act_std"]])
        return tr.value, tr.value_before, extra
