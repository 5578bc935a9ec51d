"""What a heatmap's cells mean beyond the binned matrix (docs/API.md, *Cell
notes*): the steps a GradScaler skipped, how often each row samples the
metric, and in one word why a row has none of it.

Pure numpy over the rows the heatmap bins; the plugin adds the answers to
the ``heatmap`` route. A blank cell must not read as a healthy one: a step
the scaler skipped, a metric measured every 10th step, and a ReLU that has
no gradient norm are three different blanks (tests/test_cell_notes.py).
"""

from __future__ import annotations

import numpy as np

from ..format import metadata
from .align import align

__all__ = ["PARAM_METRICS", "column_counts", "empty_reasons", "heatmap_notes", "sampling_every", "scaler_skipped"]

#: metrics measured only on rows with parameters (docs/FORMAT.md, *Metrics*:
#: "modules with parameters"): on any other row their absence is expected
PARAM_METRICS = frozenset(("grad_norm", "grad_nonfinite", "grad_missing", "weight_norm", "update_ratio",
                           "grad_carried", "opt_group", "lr", "weight_decay", "momentum"))


def scaler_skipped(scale: np.ndarray, steps: np.ndarray, nonfinite: np.ndarray | None = None) -> np.ndarray:
    """bool [S]: the logged steps whose optimizer step a GradScaler skipped.

    ``scale`` is the ``<optimizer>`` row's GradScaler scale at each of
    ``steps``: recorded before ``scaler.update()``, so a scale lower at the
    next step means this step found inf/NaN gradients and was skipped (the
    rule of diagnosis/aspects/optimizer.py). ``nonfinite`` (optional, [S]):
    the step's count of non-finite gradient values over every row; with a
    scaler those are the scaled gradients it skips on, which also tells the
    last step and a scale stuck at its bottom.
    """
    scale = np.asarray(scale, dtype=np.float64)
    out = np.zeros(scale.shape[0], dtype=bool)
    with np.errstate(invalid="ignore"):
        if scale.shape[0] >= 2:
            out[:-1] = (np.diff(steps) == 1) & (scale[1:] < scale[:-1])
        if nonfinite is not None:
            out |= np.asarray(nonfinite, dtype=np.float64) > 0
    return out


def column_counts(mask: np.ndarray, steps: np.ndarray, col_start, col_end) -> np.ndarray:
    """int32 [C]: how many of the steps marked in ``mask`` fall in each
    column [col_start[c], col_end[c]]."""
    marked = np.asarray(steps)[np.asarray(mask, dtype=bool)]
    lo = np.searchsorted(marked, np.asarray(col_start), side="left")
    hi = np.searchsorted(marked, np.asarray(col_end), side="right")
    return (hi - lo).astype(np.int32)


def sampling_every(values: np.ndarray, steps: np.ndarray, config: dict | None = None) -> np.ndarray:
    """int32 [L], per row of ``values`` float [S, L] at logged ``steps``: 1 when the row
    has the metric at every step, 0 when at none, else the stride N of
    "sampled every N steps": the longest gap between its samples, rounded up
    to the writer's ``stats_every`` or ``update_every`` (from ``config``)
    when one of them is at least that gap."""
    values = np.asarray(values)
    S = values.shape[0]
    measured = ~np.isnan(values)
    counts = measured.sum(axis=0)
    strides = sorted(int(config[k]) for k in ("stats_every", "update_every")
                     if config and isinstance(config.get(k), int) and config[k] > 1)
    out = np.where(counts > 0, 1, 0).astype(np.int32)
    for r in np.flatnonzero((counts > 0) & (counts < S)):
        at = steps[measured[:, r]]
        gap = int(np.diff(at).max()) if at.shape[0] > 1 else int(steps[-1] - steps[0]) + 1
        # the gap after the last sample counts too (a sample every 100 steps
        # of a 160-step run has one sample after step 9)
        gap = max(gap, int(steps[-1] - at[-1]) + 1, 2)
        out[r] = next((k for k in strides if k >= gap), gap)
    return out


def empty_reasons(values: np.ndarray, names, metric: str, elsewhere: np.ndarray | None = None) -> list:
    """Per row of ``values`` float [S, L]: None where it holds the metric at
    some step, else why not, in a word or two: "pseudo-layer" (``<input>``,
    ``<loss>``, ``<optimizer>`` hold a few metrics only), "no parameters" (a metric
    of parameters on a module without), "not sampled" (the row has it at
    other steps: ``elsewhere`` bool [L]), "not measured"."""
    has = (~np.isnan(np.asarray(values))).any(axis=0)
    out = []
    for r, name in enumerate(names):
        if r < has.shape[0] and has[r]:
            out.append(None)
        elif elsewhere is not None and r < elsewhere.shape[0] and elsewhere[r]:
            out.append("not sampled")
        elif name in metadata.PSEUDO_LAYERS:
            out.append("pseudo-layer")
        elif metric in PARAM_METRICS:
            out.append("no parameters")
        else:
            out.append("not measured")
    return out


def heatmap_notes(read, names, metric: str, steps, values, whole, hm) -> dict:
    """The notes of a heatmap binned from rows: ``skipped`` (per column, for a
    run with a GradScaler), ``every`` and ``empty`` (per row, for a metric).
    ``read(tags)`` gives the run's Series by tag; ``values`` are the rows'
    values at ``steps`` (None for the state map), ``whole`` the same over the
    whole run, ``hm`` the binned heatmap."""
    series = read((metadata.TAG_CONFIG,))
    configs = series[metadata.TAG_CONFIG].records() if metadata.TAG_CONFIG in series else []
    config = next((c for _, c in reversed(configs) if isinstance(c, dict)), {})
    out = {}
    skipped = np.zeros(steps.shape[0], dtype=bool)
    if config.get("scaler") and metadata.PSEUDO_OPTIMIZER in names:
        tags = (metadata.stats_tag("scale"), metadata.stats_tag("grad_nonfinite"))
        got = read(tags)
        scale, nonfinite = (align(got.get(t), steps, len(names), np.nan, np.float32) for t in tags)
        skipped = scaler_skipped(scale[:, names.index(metadata.PSEUDO_OPTIMIZER)], steps,
                                 np.nan_to_num(nonfinite, nan=0.0).max(axis=1))
        out["skipped"] = column_counts(skipped, steps, hm.col_start, hm.col_end)
    if values is not None:
        elsewhere = None if whole is None else (~np.isnan(whole)).any(axis=0)
        # (a skipped step's statistics are non-finite, not unsampled)
        out["every"] = sampling_every(values[~skipped], steps[~skipped], config)
        out["empty"] = empty_reasons(values, names, metric, elsewhere)
    return out
