"""Per-step matrices put on a step axis: the routes' common reshaping of a
``plugin_data.Series`` (steps [S], data [S, L])."""

from __future__ import annotations

import numpy as np

__all__ = ["align", "column", "step_slice"]


def align(series, steps: np.ndarray, width: int, fill, dtype) -> np.ndarray:
    """``series`` (a plugin_data.Series or None) as a [len(steps), width]
    matrix on the given step axis; missing steps and rows hold ``fill``."""
    out_shape = (steps.shape[0], width)
    if series is None or series.data.shape[0] == 0:
        return np.full(out_shape, fill, dtype=dtype)
    data = series.data
    if series.steps.shape == steps.shape and np.array_equal(series.steps, steps):
        rows = data
    else:
        idx = np.searchsorted(series.steps, steps)
        idx_c = np.minimum(idx, series.steps.shape[0] - 1)
        found = series.steps[idx_c] == steps
        rows = np.where(found[:, None], data[idx_c], np.array(fill, dtype=dtype))
    if rows.shape[1] == width:
        return rows
    out = np.full(out_shape, fill, dtype=dtype)
    w = min(width, rows.shape[1])
    out[:, :w] = rows[:, :w]
    return out


def column(series, row: int, steps: np.ndarray, fill, dtype) -> np.ndarray:
    """Row ``row`` of a per-step matrix at the given steps (``fill`` where
    the series has no such step or is narrower than ``row``)."""
    out = np.full(steps.shape[0], fill, dtype=dtype)
    if series is None or series.data.shape[0] == 0 or row >= series.data.shape[1]:
        return out
    idx = np.searchsorted(series.steps, steps)
    idx_c = np.minimum(idx, series.steps.shape[0] - 1)
    found = series.steps[idx_c] == steps
    out[found] = series.data[idx_c[found], row]
    return out


def step_slice(steps: np.ndarray, start: int, end: int) -> slice:
    """The slice of ascending ``steps`` that lie in [start, end]."""
    lo = int(np.searchsorted(steps, start, side="left"))
    hi = int(np.searchsorted(steps, end, side="right"))
    return slice(lo, hi)
