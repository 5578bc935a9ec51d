"""Binning a layer x step matrix into columns: the heatmap's rule.

Pure numpy; no TensorBoard. The plugin bins a run's rows into the heatmap's
columns with it, and the writer bins each block of rows into its block
summary (docs/FORMAT.md, *Block summaries*) with it. The rule (docs/API.md)
is built so that a single failing step stays visible at any zoom:

- a bin's state is the worst state (highest ``metadata.state_rank``) of its steps;
- a bin's value is, when that worst state is a failure (rank > healthy), the
  value at the first step of the bin having that state; otherwise the bin's
  extreme value: farthest from 1 on a log scale (max |log10 |v||) for
  norm-like metrics, the maximum for fractions and counts. +-Inf wins over
  any finite value; NaN ("not measured") loses to any value, so a bin is NaN
  only when it has no measurement at all. Ties go to the earliest step.

It picks, per cell, the best step by a total order (a failing state, ranked,
first; then the value's score, earliest on ties), so binning bins gives what
binning their steps at once gives: a bin of whole blocks is binned from the
blocks' summaries (``summarize``) exactly as from their rows.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import metadata

__all__ = ["STATE_METRIC", "MAX_RULE_METRICS", "Heatmap", "bin_bounds", "bin_heatmap", "bin_rows",
           "summarize"]

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
# Per code: the code a bin of that code alone shows (unknown for undefined
# codes), and whether it is a failure (ranked above healthy); one lookup each.
_CANONICAL = _CODE_OF_RANK[_RANK_OF_CODE + 1]
_FAILING = _RANK_OF_CODE > _HEALTHY_RANK
# Cells of a bin looked at one by one (a gather) only while they are fewer
# than 1 in _SPARSE; more, and one pass over the whole matrix is cheaper.
_SPARSE = 8
# Bins are binned a chunk at a time, about this many cells ([bins, L]) each:
# a chunk's temporaries (a few hundred KB) stay in the caches and in memory
# malloc keeps. Whole-matrix temporaries of tens of MB are fresh pages each
# request, whose first touch cost more than the arithmetic
# (benchmarks/plugin_scale.py).
_CHUNK_CELLS = 1 << 16


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


def _binned(arr: np.ndarray, starts: np.ndarray, n: int) -> np.ndarray:
    """[S, L] -> [C, Q, L] with Q the largest bin size (a view when the bins
    are even); a shorter bin repeats its last row, harmless for max, min and
    "first index of" lookups."""
    sizes = np.diff(np.append(starts, n))
    q = int(sizes.max())
    if int(sizes.min()) == q:
        return arr.reshape(starts.shape[0], q, *arr.shape[1:])
    idx = starts[:, None] + np.minimum(np.arange(q), sizes[:, None] - 1)
    return arr[idx]


def _first_match(binned: np.ndarray, pair: np.ndarray, mask: np.ndarray, absolute: bool = False) -> np.ndarray:
    """Per bin and column [C, L], the offset in the bin of the first element
    equal to either of ``pair`` [2, C, L] (of its absolute value with
    ``absolute``), looked for only where ``mask`` (others get 0): in a gather
    of those bins when they are few, in one pass over all otherwise."""
    if mask.sum() * _SPARSE > mask.size:
        b = np.abs(binned) if absolute else binned
        hit = (b == pair[0][:, None, :]) | (b == pair[1][:, None, :])
        return np.where(mask, hit.argmax(axis=1), 0)
    out = np.zeros(mask.shape, dtype=np.int64)
    ci, li = np.nonzero(mask)
    cells = binned[ci, :, li]  # [K, Q]
    if absolute:
        cells = np.abs(cells)
    t = pair[:, ci, li]
    out[ci, li] = ((cells == t[0][:, None]) | (cells == t[1][:, None])).argmax(axis=1)
    return out


def _worst_states(states: np.ndarray, starts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(worst code [C, L], offset in the bin of its first step [C, L], or
    None when every offset is 0).

    Most bins hold one code all along (a layer healthy, or failing, for the
    whole bin): their worst is that code at offset 0, found by a max and a
    min of the codes; only bins that mix codes are ranked."""
    codes = _binned(states, starts, n)
    hi = codes.max(axis=1)
    mixed = hi != codes.min(axis=1)
    if mixed.sum() * _SPARSE > mixed.size:
        rank = _RANK_OF_CODE[codes]
        top = rank.max(axis=1)
        return _CODE_OF_RANK[top + 1], (rank == top[:, None, :]).argmax(axis=1)
    worst = _CANONICAL[hi]
    ci, li = np.nonzero(mixed)
    if not ci.size:
        return worst, None
    pick = np.zeros(hi.shape, dtype=np.int64)
    rank = _RANK_OF_CODE[codes[ci, :, li]]  # [K, Q]
    top = rank.max(axis=1)
    worst[ci, li] = _CODE_OF_RANK[top + 1]
    pick[ci, li] = (rank == top[:, None]).argmax(axis=1)
    return worst, pick


def _extremes(values: np.ndarray, starts: np.ndarray, n: int, linear: bool) -> np.ndarray:
    """The extreme value of every bin [C, L] (module docstring).

    Found from per-bin maxima and minima, without a score per step: on a
    linear scale the extreme is the maximum (an infinity wins); on a log
    scale it is the largest or the smallest |v|, whichever is farther from 1.
    Only the cells where that leaves a choice between two values (both
    infinities, |v| at equal log distance, a magnitude that occurs with both
    signs) look for the first of them in the bin."""
    vb = _binned(values, starts, n)
    with np.errstate(all="ignore"):
        smax = np.fmax.reduce(vb, axis=1)  # NaN only for a bin without measurement
        smin = np.fmin.reduce(vb, axis=1)
        if linear:
            neg_inf = smin == -np.inf
            if not neg_inf.any():
                return smax
            out = np.where(neg_inf, smin, smax)
            tie = (smax == np.inf) & neg_inf
            if tie.any():
                out = _first_where(tie, out, values, vb, starts, np.stack([smax, smin]))
            return out
        if not smin.size or not np.fmin.reduce(smin, axis=None) < 0:  # NaN: nothing measured
            # No negative value (norms, scales): |v| is v, no sign to choose.
            # smin is farther from 1 in log than smax iff smin * smax < 1
            # (exact in float64); a zero is, unless smax is inf (0 * inf is NaN).
            product = np.multiply(smin, smax, dtype=np.float64)
            out = np.where(product < 1, smin, smax)
            even = (product == 1) & (smin != smax)
            if even.any():
                out = _first_where(even, out, values, vb, starts, np.stack([smax, smin]))
            return out
        # Log rule: magnitudes.
        amax = np.fmax(smax, -smin)
        straddle = (smin < 0) & (smax > 0)
        amin = np.where(smin >= 0, smin, -smax)
        if straddle.any():
            ci, li = np.nonzero(straddle)
            if ci.size * _SPARSE > straddle.size:
                amin = np.where(straddle, np.fmin.reduce(np.abs(vb), axis=1), amin)
            else:
                amin[ci, li] = np.fmin.reduce(np.abs(vb[ci, :, li]), axis=1)
        # 0 < amin <= amax: amin is farther from 1 in log than amax iff
        # amin * amax < 1 (exact: a product of two float32 fits a float64).
        product = amin.astype(np.float64) * amax
        inf = amax == np.inf
        zero = (amin == 0) & ~inf
        take_lo = zero | (~inf & (product < 1))
        even = ~inf & ~zero & (product == 1) & (amin != amax)
        mag = np.where(take_lo, amin, amax)
        # Which sign: the magnitude's sign when only one sign reaches it
        # (the smallest |v| of a bin holding both signs may have either).
        has_pos = np.where(take_lo, (smin >= 0) | straddle, smax == amax)
        has_neg = np.where(take_lo, (smax <= 0) | straddle, smin == -amax)
        out = np.where(has_neg & ~has_pos, -mag, mag).astype(np.float32)
        # Both signs reach it, or the two ends are equally far from 1: the first in the bin.
        tie = (has_pos & has_neg & ~zero) | even
        if tie.any():
            two = np.stack([mag, np.where(even, amin, -mag)])
            out = _first_where(tie, out, values, vb, starts, np.abs(two), absolute=True)
        return out


def _first_where(mask: np.ndarray, out: np.ndarray, values: np.ndarray, binned: np.ndarray,
                 starts: np.ndarray, pair: np.ndarray, absolute: bool = False) -> np.ndarray:
    """``out`` [C, L] with each cell of ``mask`` replaced by the first value
    of its bin equal to either of ``pair`` (``_first_match``)."""
    first = _first_match(binned, pair, mask, absolute)
    return np.where(mask, np.take_along_axis(values, starts[:, None] + first, axis=0), out)


def bin_heatmap(
    steps: np.ndarray,
    values: np.ndarray | None,
    states: np.ndarray,
    max_cols: int,
    metric: str,
    last_steps: np.ndarray | None = None,
) -> Heatmap:
    """Bin S logged steps of L layers into at most ``max_cols`` columns.

    ``steps`` int [S] ascending; ``values`` float [S, L] (None for the state
    metric); ``states`` uint8 [S, L] (STATE_UNKNOWN where there is no data).
    Rows that each stand for several steps (block summaries) give their
    last steps in ``last_steps`` (default: ``steps``), the column ends.
    Returns a Heatmap in layer-major layout. S may be 0 (then C = 0).
    """
    steps = np.asarray(steps, dtype=np.int64)
    last_steps = steps if last_steps is None else np.asarray(last_steps, dtype=np.int64)
    n = steps.shape[0]
    if last_steps.shape != steps.shape:
        raise ValueError(f"last_steps {last_steps.shape} and steps {steps.shape} differ")
    values, states = _checked(values, states, metric)
    if states.shape[0] != n:
        raise ValueError(f"states must be [S={n}, L], got {states.shape}")
    if n == 0:
        num_layers = states.shape[1]
        empty = np.zeros(0, dtype=np.int64)
        return Heatmap(empty, empty, np.zeros((num_layers, 0), np.float32),
                       np.zeros((num_layers, 0), np.uint8))
    starts = bin_bounds(n, max_cols)
    ends = np.append(starts[1:], n) - 1
    out_values, out_states = bin_rows(values, states, starts, metric)
    return Heatmap(steps[starts], last_steps[ends], out_values, out_states)


def bin_rows(values: np.ndarray | None, states: np.ndarray, starts: np.ndarray,
             metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(values float32 [L, C], states uint8 [L, C]) of the bins of rows that
    start at ``starts`` (int [C], ascending, the first 0; the last bin ends
    at the last row) of ``values`` [S, L] (None for the state metric) and
    ``states`` [S, L]."""
    values, states = _checked(values, states, metric)
    n = states.shape[0]
    starts = np.asarray(starts, dtype=np.int64)
    num_layers, cols = states.shape[1], starts.shape[0]
    if cols == n:
        # One row per bin: nothing to choose.
        out_states = _CANONICAL[states]
        out_values = out_states.astype(np.float32) if metric == STATE_METRIC else values
        return np.ascontiguousarray(out_values.T), np.ascontiguousarray(out_states.T)
    ends = np.append(starts[1:], n) - 1
    linear = metric in MAX_RULE_METRICS
    out_values = np.empty((num_layers, cols), np.float32)
    out_states = np.empty((num_layers, cols), np.uint8)
    per = max(1, _CHUNK_CELLS // max(num_layers, 1))
    for c0 in range(0, cols, per):
        c1 = min(cols, c0 + per)
        s0, s1 = int(starts[c0]), int(ends[c1 - 1]) + 1
        chunk_states, pick = _worst_states(states[s0:s1], starts[c0:c1] - s0, s1 - s0)
        out_states[:, c0:c1] = chunk_states.T
        if metric == STATE_METRIC:
            out_values[:, c0:c1] = chunk_states.T
            continue
        chunk_values = _values(values[s0:s1], starts[c0:c1] - s0, chunk_states, pick, linear)
        out_values[:, c0:c1] = chunk_values.T
    return out_values, out_states


def _checked(values, states, metric: str) -> tuple[np.ndarray | None, np.ndarray]:
    """(values float32, states uint8) as arrays, ValueError unless states
    is [S, L] and values (unless the metric is the state) of its shape."""
    states = np.asarray(states, dtype=np.uint8)
    if states.ndim != 2:
        raise ValueError(f"states must be [S, L], got {states.shape}")
    if metric == STATE_METRIC:
        return None, states
    values = np.asarray(values, dtype=np.float32)
    if values.shape != states.shape:
        raise ValueError(f"values {values.shape} and states {states.shape} differ")
    return values, states


def _values(values: np.ndarray, starts: np.ndarray, worst: np.ndarray, pick: np.ndarray | None,
            linear: bool) -> np.ndarray:
    """The value [C, L] of every bin of ``values`` [S, L] (the last bin ends
    at S) whose worst state and its offset are ``worst`` and ``pick``
    (``_worst_states``): the value at that offset where the state is a
    failure, the bin's extreme elsewhere."""
    out = _extremes(values, starts, values.shape[0], linear)
    ci, li = np.nonzero(_FAILING[worst])
    if ci.size:
        rows = starts[ci] if pick is None else starts[ci] + pick[ci, li]
        out[ci, li] = values[rows, li]
    return out


# Metric columns by scale: a block is summarized one scale at a time.
_LINEAR_COLUMNS = np.array([i for i, m in enumerate(metadata.METRICS) if m in MAX_RULE_METRICS])
_LOG_COLUMNS = np.array([i for i, m in enumerate(metadata.METRICS) if m not in MAX_RULE_METRICS])


def summarize(rows: np.ndarray, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The summary of a block of n rows: ``rows`` float32 [n, L, len(METRICS)]
    and ``states`` uint8 [n, L] binned into one column, every metric by its
    own rule: (values float32 [L, len(METRICS)], states uint8 [L]). Binning
    summaries of consecutive blocks gives what binning their rows gives."""
    rows = np.asarray(rows, dtype=np.float32)
    states = np.asarray(states, dtype=np.uint8)
    n, num_layers, num_metrics = rows.shape
    if n == 0 or states.shape != (n, num_layers) or num_metrics != len(metadata.METRICS):
        raise ValueError(f"a block is n >= 1 rows [n, L, {len(metadata.METRICS)}] and states "
                         f"[n, L]; got {rows.shape} and {states.shape}")
    starts = np.zeros(1, dtype=np.int64)
    worst, pick = _worst_states(states, starts, n)
    out = np.empty((num_layers, num_metrics), np.float32)
    # Log-scale metrics with a negative value in the block (act_mean) take
    # the rule's signed path; the others (norms) its cheaper one.
    with np.errstate(invalid="ignore"):
        signed = np.fmin.reduce(rows[:, :, _LOG_COLUMNS], axis=(0, 1)) < 0
    groups = ((_LINEAR_COLUMNS, True), (_LOG_COLUMNS[~signed], False), (_LOG_COLUMNS[signed], False))
    for columns, linear in groups:
        if not columns.size:
            continue
        # [n, L, m] as [n, L*m]: each (layer, metric) a column of its own,
        # with its layer's state.
        part = rows[:, :, columns].reshape(n, -1)
        m = columns.shape[0]
        w = np.repeat(worst, m, axis=1)
        p = None if pick is None else np.repeat(pick, m, axis=1)
        out[:, columns] = _values(part, starts, w, p, linear).reshape(num_layers, m)
    return out, worst[0]
