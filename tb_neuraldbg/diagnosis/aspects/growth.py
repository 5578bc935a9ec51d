"""Where a growth of the activations began, when it crosses the explosion
threshold only at a later module (docs/diagnosis.md, "Where a growth
begins").

An explosion compounds: over depth (every module, or every residual
addition, multiplies the signal a little) or over time (a module's output
grows a little at each update and feeds the ones after it). The module where
the threshold is crossed is where the growth became large, not where it
began. The growth began at the first module, in forward order, whose output
left the order of magnitude (``vs_max``, the factor the activation aspect
already takes as a layer's healthy spread around its own history) of a
reference that does not grow with it:

- over depth, at the explosion's step: the batch's RMS. The first module
  whose output spread is an order of magnitude above the batch's is where
  the compounding became visible (tests/scenarios/growth.py's doubled skip);
- over time, before the explosion's onset: the module's own first
  measurement. The first module whose spread grew an order of magnitude over
  it, and beyond the batch's scale (a branch initialised at zero grows from
  nothing: tests/scenarios/healthy.py's Fixup-style nets), at the earliest
  step any module did, is where the growth began.
"""

from __future__ import annotations

import numpy as np

from ._base import grow

__all__ = ["GrowthOrigin"]


class GrowthOrigin:
    """Per-row memory of the activations' spread: each module's first
    measured spread and the step it first grew an order of magnitude above
    it, and, per row, the first module above the batch's order of magnitude
    at its last measurement."""

    def __init__(self, vs_max: float):
        self.vs_max = vs_max
        self.first = np.zeros(0)  # first positive finite spread (NaN: none yet)
        self.grew_at = np.zeros(0, dtype=np.int64)  # step it grew vs_max-fold (-1: never)
        self._fresh = np.zeros(0, dtype=bool)  # rows whose onset picture is not taken
        self.depth_from = np.zeros(0, dtype=np.int64)  # per row: first row above the batch's scale (-1: none)
        # ... as of the first step of the row's explosion not yet confirmed
        # (the hysteresis confirms it steps later, when the growth has
        # compounded on: the onset's picture is the one that says where it
        # began), and whether it was the network's amplification then
        self.onset_from = np.zeros(0, dtype=np.int64)
        self.onset_cum = np.zeros(0, dtype=bool)

    def grow(self, n: int) -> None:
        """Make room for ``n`` rows (new rows start unmeasured)."""
        self.first = grow(self.first, n, np.nan)
        self.grew_at = grow(self.grew_at, n, -1)
        self.depth_from = grow(self.depth_from, n, -1)
        self.onset_from = grow(self.onset_from, n, -1)
        self.onset_cum = grow(self.onset_cum, n, False)
        self._fresh = grow(self._fresh, n, True)

    def feed(self, step: int, std: np.ndarray, measured: np.ndarray, batch_rms: float) -> None:
        """One measured step: ``std`` [L] of the module rows ``measured``."""
        ok = measured & np.isfinite(std) & (std > 0)
        self.first = np.where(ok & np.isnan(self.first), std, self.first)
        base = batch_rms if np.isfinite(batch_rms) and batch_rms > 0 else np.nan
        with np.errstate(invalid="ignore"):
            grew = ok & (self.grew_at < 0) & (std >= self.vs_max * self.first) & (std > np.nan_to_num(base))
            above = np.flatnonzero(ok & (std >= self.vs_max * base))
        self.grew_at = np.where(grew, step, self.grew_at)
        # (a row before the first one above: none of its own)
        rows = np.arange(len(std))
        d = int(above[0]) if len(above) else -1
        mine = np.where((d >= 0) & (rows >= d), d, -1)
        self.depth_from = np.where(measured & np.isfinite(std), mine, self.depth_from)

    def note_onset(self, exploding: np.ndarray, confirmed: np.ndarray, measured: np.ndarray,
                   cumulative: np.ndarray) -> None:
        """Keep the picture of the first step of each row's pending explosion
        (``exploding``: raw state of this step; ``confirmed``: already
        confirmed exploding); forget it where the row measured healthy."""
        take = exploding & ~confirmed & self._fresh
        self.onset_from = np.where(take, self.depth_from, self.onset_from)
        self.onset_cum = np.where(take, cumulative, self.onset_cum)
        self._fresh = np.where(take, False, np.where(measured & ~exploding, True, self._fresh))

    def origin(self, i: int, onset: int, cumulative: bool) -> tuple[int, int] | None:
        """(row, step) where the growth that explodes at row ``i`` from step
        ``onset`` began, when that is another (earlier) row; else None.
        ``cumulative``: the explosion is the network's amplification of the
        batch, not row ``i``'s own (only then does depth count)."""
        before = np.flatnonzero((self.grew_at[:i + 1] >= 0) & (self.grew_at[:i + 1] < onset))
        if len(before):
            first_step = int(self.grew_at[before].min())
            row = int(before[self.grew_at[before] == first_step][0])
            return (row, first_step) if row < i else None
        d = int(self.onset_from[i]) if i < len(self.onset_from) else -1
        if (cumulative or bool(self.onset_cum[i])) and 0 <= d < i:
            return d, onset
        return None
