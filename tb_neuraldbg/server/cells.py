"""What a heatmap's cells mean beyond the binned matrix (docs/API.md, *Cell
notes*): the steps a GradScaler skipped, how often each row samples the
metric, and in one word why a row has none of it.

Numpy over the rows or the block summaries the heatmap bins (a long run's
skipped steps are read once, ``run_skips``); the plugin adds the answers to
the ``heatmap`` route. A blank cell must not read as a healthy one: a step
the scaler skipped, a metric measured every 10th step, and a ReLU that has
no gradient norm are three different blanks (tests/test_cell_notes.py).
"""

from __future__ import annotations

import numpy as np

from ..format import metadata
from .align import align, column

__all__ = [
    "FULL_STEP_METRICS",
    "PARAM_METRICS",
    "UPDATE_STEP_METRICS",
    "block_every",
    "column_counts",
    "empty_reasons",
    "heatmap_notes",
    "run_config",
    "sampling_every",
    "scaler_skipped",
    "skipped_steps",
]

#: metrics measured only on rows with parameters (docs/FORMAT.md, *Metrics*:
#: "modules with parameters"): on any other row their absence is expected
PARAM_METRICS = frozenset(("grad_norm", "grad_nonfinite", "grad_missing", "weight_norm", "update_ratio",
                           "grad_carried", "opt_group", "lr", "weight_decay", "momentum", "update_lost_frac",
                           "update_elements"))
#: the writer's schedules (docs/FORMAT.md, *Metrics*, "measured"): metrics
#: measured on full steps only (``stats_every``), and on update steps only
#: (``update_every``); every other metric is measured at every step
FULL_STEP_METRICS = frozenset(("weight_norm", "act_mean", "act_std", "act_absmax", "act_zero_frac",
                               "act_dead_frac", "act_sat_frac", "in_zero_frac", "in_dead_frac", "fwd_gain",
                               "bwd_gain", "unit_spread", "gout_norm", "target_var", "input_integers",
                               "prior_loss", "sample_spread"))
UPDATE_STEP_METRICS = frozenset(("update_ratio", "update_lost_frac", "update_elements"))
#: what a GradScaler's skipped steps are told by (``scaler_skipped``)
SKIP_TAGS = (metadata.stats_tag("scale"), metadata.stats_tag("grad_nonfinite"))
#: the batch's statistics, measured on the ``<input>`` row at every step
_INPUT_EVERY_STEP = frozenset(("act_mean", "act_std", "act_absmax"))


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


def skipped_steps(series: dict, names) -> np.ndarray:
    """int64: the logged steps of a whole run that a GradScaler skipped
    (``scaler_skipped``), from its Series by tag (``SKIP_TAGS``): of the
    ``scale`` rows only ``<optimizer>``'s is read, the ``grad_nonfinite``
    rows (one per name) are taken together per step."""
    scale, nonfinite = (series.get(t) for t in SKIP_TAGS)
    steps = next((s.steps for s in (scale, nonfinite) if s is not None), np.zeros(0, np.int64))
    if steps.shape[0] == 0 or metadata.PSEUDO_OPTIMIZER not in names:
        return np.zeros(0, np.int64)
    counts = align(nonfinite, steps, len(names), np.nan, np.float32)
    with np.errstate(invalid="ignore"):
        any_nonfinite = np.fmax.reduce(counts, axis=1)
    row = column(scale, names.index(metadata.PSEUDO_OPTIMIZER), steps, np.nan, np.float32)
    return np.asarray(steps, dtype=np.int64)[scaler_skipped(row, steps, any_nonfinite)]


def run_skips(data, ctx, eid: str, run: str, listing: dict, names, version) -> np.ndarray:
    """``skipped_steps`` of a run through the plugin's ``data``
    (plugin_data.PluginData). The provider cannot select a row: the
    ``SKIP_TAGS`` matrices are read whole, once per ``version`` of them and
    not kept (they would evict the heatmap's); the few steps they give are
    what is cached."""
    return data.memo(eid, run, f"skips{len(names)}", version,
                     lambda: skipped_steps(data.read(ctx, eid, run, SKIP_TAGS, listing, keep=False), names),
                     lambda steps: 4096 + steps.nbytes)


def column_counts(mask: np.ndarray | None, steps: np.ndarray, col_start, col_end) -> np.ndarray:
    """int32 [C]: how many of the ascending steps marked in ``mask`` (None:
    all of them) fall in each column [col_start[c], col_end[c]]."""
    marked = np.asarray(steps) if mask is None else np.asarray(steps)[np.asarray(mask, dtype=bool)]
    lo = np.searchsorted(marked, np.asarray(col_start), side="left")
    hi = np.searchsorted(marked, np.asarray(col_end), side="right")
    return (hi - lo).astype(np.int32)


def sampling_every(values: np.ndarray, steps: np.ndarray, config: dict | None = None,
                   skipped: np.ndarray | None = None) -> np.ndarray:
    """int32 [L], per row of ``values`` float [S, L] at logged ``steps``: 1 when the row
    has the metric at every step, 0 when at none, else the stride N of
    "sampled every N steps": the longest gap between its samples that holds
    a logged step without it (tests/test_cell_notes.py), rounded up
    to the writer's ``stats_every`` or ``update_every`` (from ``config``)
    when one of them is at least that gap. ``skipped`` (bool [S]): steps a
    GradScaler skipped, whose statistics are non-finite, not unsampled:
    they hold a sample where the schedule put one (a skipped full step is
    no gap) and no step without one."""
    values = np.asarray(values)
    measured = ~np.isnan(values)
    if skipped is not None and np.any(skipped):
        skipped = np.asarray(skipped, dtype=bool)
        counts = measured[~skipped].sum(axis=0)
        S = int((~skipped).sum())
        measured |= skipped[:, None]
    else:
        counts, S = measured.sum(axis=0), values.shape[0]
    strides = sorted(int(config[k]) for k in ("stats_every", "update_every")
                     if config and isinstance(config.get(k), int) and config[k] > 1)
    out = np.where(counts > 0, 1, 0).astype(np.int32)
    for r in np.flatnonzero((counts > 0) & (counts < S)):
        idx = np.flatnonzero(measured[:, r])
        at = steps[idx]
        # a gap between samples with no logged step between them is the
        # write stride (a long run's strided rows), not the sampling's
        apart = np.diff(idx) > 1
        gap = (int(np.diff(at)[apart].max(initial=1)) if at.shape[0] > 1
               else int(steps[-1] - steps[0]) + 1)
        # the gap after the last sample counts too (a sample every 100 steps
        # of a 160-step run has one sample after step 9)
        gap = max(gap, int(steps[-1] - at[-1]) + 1, 2)
        out[r] = next((k for k in strides if k >= gap), gap)
    return out


def _schedule(metric: str, name: str, config: dict) -> str | None:
    """The config key of the stride ``metric`` is measured at on row
    ``name`` ("stats_every", "update_every"), or None: every step."""
    if name == metadata.PSEUDO_INPUT and metric in _INPUT_EVERY_STEP:
        return None
    if metric == "act_mean" and config.get("nonfinite") == "every_step":
        return None
    if metric in FULL_STEP_METRICS:
        return "stats_every"
    if metric in UPDATE_STEP_METRICS:
        return "update_every"
    return None


def _stride(config: dict, key: str) -> int:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else 1


def block_every(has: np.ndarray, names, metric: str, config: dict | None, first, last, rows) -> np.ndarray:
    """int32 [L]: ``sampling_every`` for a heatmap binned from block
    summaries, where the rows' steps are not at hand: 0 for a row without
    the metric in range (``has`` bool [L]), else the stride of the writer's
    schedule for ``metric`` (``stats_every`` or ``update_every`` of
    ``config``), or 1 when it measures it at every step or when every logged
    step of the range is on that schedule (a long run's strided rows are all
    full steps). The blocks' ``first``, ``last`` step and ``rows`` (int [B])
    tell the latter: a block's rows all lie on the schedule when its ends do
    and its steps on the schedule are at least as many as its rows (the
    writer writes either a stride of full steps or consecutive steps)."""
    config = config or {}
    has = np.asarray(has, dtype=bool)
    out = has.astype(np.int32)
    first, last, rows = (np.asarray(a, dtype=np.int64) for a in (first, last, rows))
    low = _stride(config, "stats_every")  # steps below it are full and update steps
    for key in ("stats_every", "update_every"):
        k = _stride(config, key)
        picked = [r for r, name in enumerate(names) if has[r] and _schedule(metric, name, config) == key]
        if k == 1 or not picked:
            continue
        lo = np.maximum(first, low)
        below = np.clip(np.minimum(last, low - 1) - first + 1, 0, None)
        on_schedule = np.where(last >= lo, last // k - (lo - 1) // k, 0)
        ends = ((first < low) | (first % k == 0)) & ((last < low) | (last % k == 0))
        every_step = bool(np.all(ends & (rows <= below + on_schedule)))
        out[picked] = 1 if every_step else k
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


def run_config(series: dict) -> dict:
    """The writer's stored config (the last one) of a run's Series by tag, or {}."""
    configs = series[metadata.TAG_CONFIG].records() if metadata.TAG_CONFIG in series else []
    return next((c for _, c in reversed(configs) if isinstance(c, dict)), {})


def _skipped_counts(config: dict, names, hm, skips) -> dict:
    """``{"skipped": per column}`` for a run with a GradScaler, else {}: the
    run's skipped steps, ``skips(names)`` (``run_skips``: found once over
    the whole run, so a skip on a window's last step is told by the step
    after it), counted in each of ``hm``'s columns."""
    if not (config.get("scaler") and metadata.PSEUDO_OPTIMIZER in names):
        return {}
    return {"skipped": column_counts(None, skips(names), hm.col_start, hm.col_end)}


def block_notes(config: dict, names, metric: str, values, whole, hm, blocks, window: slice, skips) -> dict:
    """The notes of a heatmap ``hm`` binned from ``blocks[window]``
    (server/heatmap.py's Blocks), in the shapes of ``heatmap_notes``:
    ``skipped`` counts the run's skipped steps, ``skips(names)``, in each
    column; ``every`` is ``block_every``; ``empty`` as from rows. ``values``
    are the blocks' values in the window (None for the state map), ``whole``
    over the whole run; ``config`` the writer's (``run_config``)."""
    out = _skipped_counts(config, names, hm, skips)
    if values is not None:
        out["every"] = block_every((~np.isnan(values)).any(axis=0), names, metric, config,
                                   blocks.first[window], blocks.last[window], blocks.rows[window])
        out["empty"] = empty_reasons(values, names, metric, (~np.isnan(whole)).any(axis=0))
    return out


def heatmap_notes(config: dict, names, metric: str, steps, values, whole, hm, skips) -> dict:
    """The notes of a heatmap binned from rows: ``skipped`` (per column, for a
    run with a GradScaler), ``every`` and ``empty`` (per row, for a metric).
    ``config`` is the writer's (``run_config``); ``values`` are the rows'
    values at ``steps`` (None for the state map), ``whole`` the same over the
    whole run, ``hm`` the binned heatmap; ``skips(names)`` the run's skipped
    steps, as for ``block_notes``."""
    out = _skipped_counts(config, names, hm, skips)
    if values is not None:
        skipped = np.isin(steps, skips(names)) if "skipped" in out else None
        elsewhere = None if whole is None else (~np.isnan(whole)).any(axis=0)
        out["every"] = sampling_every(values, steps, config, skipped)
        out["empty"] = empty_reasons(values, names, metric, elsewhere)
    return out
