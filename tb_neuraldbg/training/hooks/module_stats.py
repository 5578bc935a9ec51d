"""What a full step measures of one module: its first input and its output.

Functions of their arguments, called by the instrument's per-module forward
hook (see :mod:`.instrument`) for every watched module at every full step:
0-d device tensors into the step's :class:`~.collector.Collector`, never a
host read. Which statistics a module has (dead units, saturation, whether it
is pointwise) comes from its :class:`~.modules.Behaviour`.
"""

from __future__ import annotations

import torch

from ..modules import Behaviour
from ..step import stats
from ..step.collector import Collector
from ..step.slots import Key

__all__ = ["measure_values"]

# What stats.moments() returns, in its order.
_MOMENT_KEYS = (Key.OUT_MIN, Key.OUT_MAX, Key.OUT_SUM, Key.OUT_NORM, Key.OUT_NZ)


def measure_values(
    col: Collector,
    row: int,
    module,
    behaviour: Behaviour,
    x: torch.Tensor | None,
    y: torch.Tensor | None,
    same_as_prev: bool,
    nf_only: bool,
    threads: int | None,
    full: bool,
    hist: bool,
    exact: bool,
) -> None:
    """A module's first input ``x`` (None: not measured, e.g. the previous
    row's output) and its output ``y`` (either may be None). ``full``:
    every statistic, else the non-finite flag only; ``hist``: the output's
    histogram; ``exact``: exact non-finite counts; ``nf_only``: only those
    (a full step's replay). ``threads``: torch's intra-op threads, switched
    to one around small CPU tensors (:func:`.stats.one_thread_pays`), inline
    since this runs for every module."""
    switch = (
        threads is not None
        and threads > 1
        # Not when the output is not measured (see _measure_output): no reduction.
        and not (x is None and same_as_prev and behaviour.pointwise and not (full or hist or exact))
        and stats.one_thread_pays(x, y)
    )
    if switch:
        torch.set_num_threads(1)
    try:
        if nf_only:
            if x is not None:
                col.add(stats.nonfinite_count(x.detach()), row, Key.IN_NF)
            if y is not None:
                col.add(stats.nonfinite_count(y.detach()), row, Key.OUT_NF)
        else:
            if x is not None:
                # An in-place module's input, measured now, is its output
                # already: not its input's spread (fwd_gain NaN, not 1).
                _measure_input(col, row, x, full, exact, spread=x is not y)
            if y is not None:
                _measure_output(col, row, module, behaviour, y, same_as_prev, full, hist, exact)
    finally:
        if switch:
            torch.set_num_threads(threads)


def _measure_input(col: Collector, row: int, x: torch.Tensor, full: bool, exact: bool, spread: bool) -> None:
    # Every step the sum (the non-finite flag), the counts on full steps.
    x = x.detach()
    col.add(stats.flag_moment(x), row, Key.IN_SUM)
    if full:
        col.const(row, Key.IN_N, x.numel())
        if spread:
            col.add(stats.l2_norm(x), row, Key.IN_NORM)  # its std: fwd_gain's denominator
        if x.dim() >= 2:
            nz, dead = stats.zero_and_dead(x)
            col.add(nz, row, Key.IN_NZ)
            col.add(dead, row, Key.IN_DEAD)
            col.const(row, Key.IN_UNITS, x.numel() // x.shape[0])
        else:
            col.add(stats.nonzero_count(x), row, Key.IN_NZ)
    # Exact non-finite counts cost a pass and a temporary: in a replay, and
    # with nonfinite="every_step" once a non-finite value was seen (before
    # that, the flag says "1").
    if exact:
        col.add(stats.nonfinite_count(x), row, Key.IN_NF)


def _measure_output(
    col: Collector, row: int, module, behaviour: Behaviour, y: torch.Tensor, same_as_prev: bool,
    full: bool, hist: bool, exact: bool,
) -> None:
    y = y.detach()
    col.const(row, Key.OUT_N, y.numel())
    # One value (a 0-d output, a [1, 1] score) has no spread: only its
    # non-finite flag and value, never a "constant activation".
    if not full or y.numel() == 1:
        if behaviour.pointwise and same_as_prev and not exact:
            col.const(row, Key.OUT_INHERIT, 1)  # relu(x) is finite iff x is
        else:
            col.add(stats.flag_moment(y), row, Key.OUT_SUM)
    else:
        dead = behaviour.dead and y.dim() >= 2
        vals = stats.moments(y, dead=dead)
        if dead:
            col.add(vals.pop(), row, Key.OUT_DEAD)
            col.const(row, Key.OUT_UNITS, y.numel() // y.shape[0])
        col.add_row(row, _MOMENT_KEYS, vals)
        axis = stats.unit_axis(y)
        if axis is not None and y.shape[axis] >= 2:  # (one unit: nothing to differ from)
            col.add(stats.sums_norm(y, axis), row, Key.UNIT_SUMS)
            col.const(row, Key.UNITS, y.shape[axis])
        if axis is not None and y.shape[0] >= 2:  # (one sample: nothing to differ from)
            col.add(stats.sums_norm(y, 0), row, Key.SAMPLE_SUMS)
            col.const(row, Key.SAMPLES, y.shape[0])
        if behaviour.saturation is not None:
            col.add(stats.saturated(y, *behaviour.saturation(module)), row, Key.OUT_SAT)
    if exact:
        col.add(stats.nonfinite_count(y), row, Key.OUT_NF)
    if hist:
        # (torch's current setting asked, not the step's: 1 where the
        # caller has switched already, and then no switch here)
        with stats.one_thread(y):
            col.add_run(stats.histogram(y), row, Key.HIST)
