"""Server-side binning of a layer x step matrix into at most N columns.

Pure numpy; no TensorBoard. The rule (docs/API.md) is built so that a single
failing step stays visible at any zoom:

- a bin's state is the worst state (highest ``metadata.state_rank``) of its steps;
- a bin's value is, when that worst state is a failure (rank > healthy), the
  value at the first step of the bin having that state; otherwise the bin's
  extreme value: farthest from 1 on a log scale (max |log10 |v||) for
  norm-like metrics, the maximum for fractions and counts. +-Inf wins over
  any finite value; NaN ("not measured") loses to any value, so a bin is NaN
  only when it has no measurement at all. Ties go to the earliest step.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..format import metadata

__all__ = ["STATE_METRIC", "MAX_RULE_METRICS", "Heatmap", "bin_bounds", "bin_heatmap"]

# The pseudo-metric that shows state codes instead of a statistic.
STATE_METRIC = "state"

# Fractions and counts: the extreme of a bin is its maximum. Every other
# metric is norm-like (a scale), whose extreme is the farthest from 1 in log.
MAX_RULE_METRICS = frozenset(m.name for m in metadata.METRIC_TABLE if m.scale == "linear")

# Lookup tables over all 256 uint8 codes: rank of a code (-1 for unknown or
# undefined codes) and the code of a rank (index rank + 1).
_RANK_OF_CODE = np.full(256, -1, dtype=np.int16)
for _code in metadata.STATE_CODE.values():
    _RANK_OF_CODE[_code] = metadata.state_rank(_code)
_CODE_OF_RANK = np.full(int(_RANK_OF_CODE.max()) + 2, metadata.STATE_UNKNOWN, dtype=np.uint8)
for _code in metadata.STATE_CODE.values():
    _CODE_OF_RANK[metadata.state_rank(_code) + 1] = _code
_HEALTHY_RANK = metadata.state_rank(metadata.STATE_CODE["healthy"])
# Score of an exact zero under the log rule: beyond any finite value's
# |log10| (<= ~45 for float32) yet below a non-finite value's +inf.
_ZERO_SCORE = np.float32(1e30)


@dataclasses.dataclass(frozen=True)
class Heatmap:
    """A binned matrix: ``values`` float32 [L, C], ``states`` uint8 [L, C];
    ``col_start``/``col_end`` int64 [C]: first and last logged step per bin."""

    col_start: np.ndarray
    col_end: np.ndarray
    values: np.ndarray
    states: np.ndarray


def bin_bounds(num_steps: int, max_cols: int) -> np.ndarray:
    """Start indices (int64 [C]) of C = min(max_cols, num_steps) bins that
    split ``num_steps`` consecutive logged steps as evenly as possible."""
    if max_cols < 1:
        raise ValueError(f"max_cols must be >= 1, got {max_cols}")
    cols = min(int(max_cols), int(num_steps))
    return (np.arange(cols, dtype=np.int64) * num_steps) // max(cols, 1)


def _score(values: np.ndarray, metric: str) -> np.ndarray:
    """Higher = more extreme; +inf for +-Inf, -inf for NaN."""
    with np.errstate(all="ignore"):
        if metric in MAX_RULE_METRICS:
            score = values.astype(np.float32, copy=True)
        else:
            score = np.abs(np.log10(np.abs(values, dtype=np.float32)))
            score[values == 0] = _ZERO_SCORE
    score[np.isinf(values)] = np.inf
    score[np.isnan(values)] = -np.inf
    return score


def _binned(arr: np.ndarray, starts: np.ndarray, n: int) -> np.ndarray:
    """[S, L] -> [C, Q, L] with Q the largest bin size; a shorter bin repeats
    its last row (harmless for max and for "first index of" lookups)."""
    sizes = np.diff(np.append(starts, n))
    q = int(sizes.max())
    if int(sizes.min()) == q:
        return arr.reshape(starts.shape[0], q, *arr.shape[1:])
    idx = starts[:, None] + np.minimum(np.arange(q), sizes[:, None] - 1)
    return arr[idx]


def _first_match(binned: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Per bin and column, the offset in the bin of the first element equal
    to ``target`` [C, L] (which must occur in the bin)."""
    # argmax of a bool array returns the first True; far faster here than
    # index tricks with reduceat over the whole [S, L] matrix.
    return (binned == target[:, None, :]).argmax(axis=1)


def bin_heatmap(
    steps: np.ndarray,
    values: np.ndarray | None,
    states: np.ndarray,
    max_cols: int,
    metric: str,
) -> Heatmap:
    """Bin S logged steps of L layers into at most ``max_cols`` columns.

    ``steps`` int [S] ascending; ``values`` float [S, L] (None for the state
    metric); ``states`` uint8 [S, L] (STATE_UNKNOWN where there is no data).
    Returns a Heatmap in layer-major layout. S may be 0 (then C = 0).
    """
    steps = np.asarray(steps, dtype=np.int64)
    states = np.asarray(states, dtype=np.uint8)
    n = steps.shape[0]
    if states.ndim != 2 or states.shape[0] != n:
        raise ValueError(f"states must be [S={n}, L], got {states.shape}")
    num_layers = states.shape[1]
    if metric != STATE_METRIC:
        values = np.asarray(values, dtype=np.float32)
        if values.shape != states.shape:
            raise ValueError(f"values {values.shape} and states {states.shape} differ")
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Heatmap(empty, empty, np.zeros((num_layers, 0), np.float32),
                       np.zeros((num_layers, 0), np.uint8))
    starts = bin_bounds(n, max_cols)
    ends = np.append(starts[1:], n) - 1
    if starts.shape[0] == n:
        # One step per bin: nothing to choose.
        out_states = _CODE_OF_RANK[_RANK_OF_CODE[states] + 1]
        out_values = out_states.astype(np.float32) if metric == STATE_METRIC else values
        return Heatmap(steps[starts], steps[ends], np.ascontiguousarray(out_values.T),
                       np.ascontiguousarray(out_states.T))

    rank = _binned(_RANK_OF_CODE[states], starts, n)
    worst = rank.max(axis=1)
    out_states = _CODE_OF_RANK[worst + 1]
    if metric == STATE_METRIC:
        out_values = out_states.astype(np.float32)
    else:
        score = _binned(_score(values, metric), starts, n)
        pick = _first_match(score, score.max(axis=1))
        failing = worst > _HEALTHY_RANK
        if failing.any():
            pick = np.where(failing, _first_match(rank, worst), pick)
        out_values = np.take_along_axis(values, starts[:, None] + pick, axis=0)
    return Heatmap(
        steps[starts],
        steps[ends],
        np.ascontiguousarray(out_values.T),
        np.ascontiguousarray(out_states.T),
    )
