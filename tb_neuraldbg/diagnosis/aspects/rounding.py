"""Updates the weights cannot hold: the optimizer's step rounded away by the
weights' precision (hysteresis aspect ``rounded``, on the <optimizer> row).

A weight stored in bfloat16 keeps 8 significant bits: an update smaller than
half its spacing (2^-9 of the weight) leaves it exactly as it was. Weights
kept in bfloat16 or float16 without a float32 master copy, at an ordinary
rate, lose most of their updates and barely train, while every other
statistic (gradients, update ratios of the few elements that do move,
activations) looks healthy. The writer counts, on update steps, the elements
whose gradient was non-zero and, of those, the ones the step left exactly
unchanged (``update_lost_frac``, docs/FORMAT.md).
"""

from __future__ import annotations

import numpy as np

from ._base import HEALTHY, METRIC, STATE, RowKinds, blank

__all__ = ["LOST_MAJORITY", "WIDE_DTYPES", "Rounding"]

_M = METRIC
#: the model loses its updates when more than this fraction of its elements
#: with a non-zero gradient did not change at a step (a majority: what the
#: optimizer did to the model is mostly nothing); a layer is named as losing
#: them past the same fraction of its own. A healthy run's count is near 0 in
#: float32 (a float32 weight changes under any update above 6e-8 of itself)
#: and in bfloat16 autocast (float32 weights): tests/test_diagnosis_rounding.py.
LOST_MAJORITY = 0.5
#: dtypes whose resolution only a rate orders of magnitude too small defeats
#: (float32: 2^-24 of the weight): that rate is the ``moves`` rule's story
#: (``update_negligible``), not the weights' precision.
WIDE_DTYPES = frozenset(("float32", "float64"))


class Rounding:
    """The <optimizer> row's ``rounded`` state: frozen while most of the
    elements with a non-zero gradient, over the layers that the optimizer
    holds at a rate above 0 with finite gradients, were left unchanged by
    the step (rounded away), at each update step (the engine confirms it over ``frozen_steps`` of them);
    healthy at an update step where they did not; unmeasured elsewhere."""

    def __init__(self):
        self.now = None  # (fraction of the updated elements lost, dtypes, count of the layers losing most)
        self.rows = ()

    def classify(self, row, kinds: RowKinds, skipped: bool):
        """(raw [L], None); ``skipped``: a GradScaler skipped this step
        (nothing moved on purpose)."""
        raw = blank(kinds.n)
        i = kinds.opt_index
        lost = row[:, _M["update_lost_frac"]]
        if i < 0 or skipped or not np.isfinite(lost).any():
            return raw, None
        g = row[:, _M["grad_norm"]]
        lr = row[:, _M["lr"]]
        nf = row[:, _M["grad_nonfinite"]]
        wide = np.array([d in WIDE_DTYPES for d in kinds.dtypes], dtype=bool)
        # (a layer the optimizer does not hold, or at a rate of 0, does not
        # move by design: the weight aspect's frozen rows; a non-finite
        # gradient is the nonfinite rules')
        judged = (kinds.is_mod & np.isfinite(lost) & ~wide & (row[:, _M["opt_group"]] != -1) & ~(lr <= 0)
                  & np.isfinite(g) & (g > 0) & ~(nf > 0))
        if not judged.any():
            return raw, None
        # the model's updated elements (each layer's lost fraction weighted
        # by its count: a small layer that loses all is not most of the model)
        size = row[:, _M["update_elements"]]
        size = np.where(np.isfinite(size) & (size > 0), size, 0.0)
        total = float(size[judged].sum())
        frac = float((lost[judged] * size[judged]).sum() / total) if total > 0 else float(np.median(lost[judged]))
        losing = judged & (lost > LOST_MAJORITY)
        dtypes = sorted({kinds.dtypes[j] for j in np.flatnonzero(losing)} - {""})
        self.rows = tuple(kinds.names[j] for j in np.flatnonzero(losing))
        self.now = (frac, ",".join(dtypes), len(self.rows))
        raw[i] = STATE["frozen"] if frac > LOST_MAJORITY else HEALTHY
        return raw, None

    def evidence(self, code, value, before):
        """The fraction of the model's updated elements lost, on every row."""
        now = self.now[0] if self.now else np.nan
        return np.full(len(code), now), np.full(len(code), np.nan)

    def event_fields(self, tr):
        """(value, value_before, extra): the fraction of the model's
        updated elements rounded away, the dtype, the layers that lose them."""
        if tr.to_code == HEALTHY or self.now is None:
            return tr.value, tr.value_before, {}
        frac, dtype, count = self.now
        extra = {"cause": "update_rounded", "layers": list(self.rows[:5]), "layer_count": count}
        if dtype:
            extra["dtype"] = dtype
        return frac, tr.value_before, extra
