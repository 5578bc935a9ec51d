"""The rows and their parameters, and what a step measures of those: gradient norms, weight norms, updates.

:class:`RowTable` knows which layer each row is, which parameters it owns
and, once a step, which of them require grad. The functions below take that layout and the
step's settings as arguments and return what they measured: they read no
hook state, so the instrument calls each once a step (never per module).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter, is_
from typing import Any, Callable, NamedTuple

import numpy as np
import torch
from torch import nn

from ...format import metadata
from ..step import stats
from ..step.collector import Collector
from ..step.slots import Key

__all__ = ["RowTable", "Layout", "GradientReading", "measure_gradients", "snapshot_weights", "add_update_norms",
           "grads_scaled"]

_REQUIRES_GRAD = attrgetter("requires_grad")


class Layout(NamedTuple):
    """The watched parameters that require grad, their rows (a list and an
    array), and the distinct rows among them."""

    params: list
    rows: list
    row_array: np.ndarray
    present: np.ndarray


class RowTable:
    """The step vector's rows: which layer each one is and which watched
    parameters it owns, and the step's :class:`Layout` of those.

    Row 0 is ``<input>``; a watched module gets its row when it first runs
    (in forward order), ``<loss>`` and ``<optimizer>`` theirs at the first
    step's end (:meth:`pseudo_rows`). Rows are keyed by the watched module's
    name: DataParallel calls replicas (new module objects every step) that
    carry the same hooks. ``on_owned(params)`` is called with the parameters
    a row takes over (the instrument may hook them).

    The layout is computed once a step and again when a row is added: a
    model of thousands of parameters pays a Python pass over them for each,
    so nothing per row or per hook walks them again."""

    def __init__(self, on_owned: Callable[[list], None]):
        self.layers: list[dict] = [{"name": metadata.PSEUDO_INPUT, "type": "input"}]
        self.row_of: dict[str, int] = {}
        self.of_row: dict[int, list[nn.Parameter]] = {}
        self.loss_row: int | None = None
        self.opt_row: int | None = None
        self._on_owned = on_owned
        # Each watched module's parameters, by id(module), until its row exists.
        self._pending: dict[int, list[nn.Parameter]] = {}
        self._owned: set[int] = set()  # ids of parameters some module claimed
        self._flat: Layout | None = None  # every owned parameter
        self._step: Layout | None = None  # this step's: those that require grad now

    def watch(self, name: str, m: nn.Module, own: list) -> None:
        """``m`` (watched as ``name``) owns ``own`` (its parameters not
        claimed by a module watched before it). A module that replaces one
        whose row exists hands them to that row now."""
        own = [p for p in own if id(p) not in self._owned]
        self._owned.update(id(p) for p in own)
        self._pending[id(m)] = own
        row = self.row_of.get(name)
        if row is not None:
            self._own(row, own)

    def row_for(self, name: str, m: nn.Module) -> int:
        """The row of the module watched as ``name``, made at its first call."""
        row = self.row_of.get(name)
        if row is None:
            row = len(self.layers)
            self.layers.append({"name": name, "type": type(m).__name__})
            self.row_of[name] = row
            self._own(row, self._pending.get(id(m), []))
        return row

    def pseudo_rows(self) -> tuple[int, int]:
        """The rows of ``<loss>`` and ``<optimizer>``: fixed at the first
        call (the first step's end), after the modules seen so far; modules
        first seen later are appended after them."""
        if self.loss_row is None:
            self.loss_row = len(self.layers)
            self.layers.append({"name": metadata.PSEUDO_LOSS, "type": "loss"})
            self.opt_row = len(self.layers)
            self.layers.append({"name": metadata.PSEUDO_OPTIMIZER, "type": "optimizer"})
        return self.loss_row, self.opt_row

    def _own(self, row: int, owned: list) -> None:
        self.of_row[row] = owned
        dtypes = {p.dtype for p in owned if p.is_floating_point()}
        if len(dtypes) == 1:  # (the weights' precision: what an update must be to change them)
            self.layers[row]["dtype"] = str(dtypes.pop()).replace("torch.", "")
        self._flat = self._step = None
        self._on_owned(owned)

    def new_step(self) -> None:
        """Look at ``requires_grad`` again at the next :meth:`layout` (a
        parameter frozen after ``watch()`` expects no gradient)."""
        self._step = None

    def layout(self) -> Layout:
        """The parameters that require grad *now*, with their rows."""
        layout = self._step
        if layout is not None:
            return layout
        flat = self._flat
        if flat is None:
            params = [p for ps in self.of_row.values() for p in ps]
            rows = [r for r, ps in self.of_row.items() for _ in ps]
            arr = np.asarray(rows, dtype=np.int64)
            flat = self._flat = Layout(params, rows, arr, np.unique(arr))
        params = flat.params
        if all(map(_REQUIRES_GRAD, params)):
            layout = flat
        else:
            keep = [i for i, p in enumerate(params) if p.requires_grad]
            rows = [flat.rows[i] for i in keep]
            arr = np.asarray(rows, dtype=np.int64)
            layout = Layout([params[i] for i in keep], rows, arr, np.unique(arr))
        self._step = layout
        return layout

    def first_trainable(self) -> nn.Parameter | None:
        """One parameter that requires grad (whose version counter tells
        whether the weights changed), or None."""
        return next((p for ps in self.of_row.values() for p in ps if p.requires_grad), None)

    def release(self) -> None:
        """Forget the parameters (the layers stay: the worker may still read them)."""
        self.of_row, self._pending = {}, {}
        self._flat = self._step = None


@dataclass(frozen=True)
class GradientReading:
    """What :func:`measure_gradients` read: the values for the step's row
    (``col``), the parameters measured with their norms (for the replay's
    comparison; None when none had a gradient), and the rows with a
    trainable parameter that got no gradient (None: no trainable parameter)."""

    col: Collector
    norms: tuple[list, Any] | None
    missing_rows: np.ndarray | None


def grads_scaled(scaler, optimizer) -> bool:
    """True while the gradients still carry the GradScaler's scale."""
    if scaler is None or not getattr(scaler, "_enabled", False) or getattr(scaler, "_scale", None) is None:
        return False
    if optimizer is None:
        return True
    state = scaler._per_optimizer_states.get(id(optimizer), {})
    stage = state.get("stage")
    return getattr(stage, "name", None) != "UNSCALED"


def measure_gradients(
    layout: Layout, divisor: torch.Tensor | None, exact: bool, norms_of: Callable = stats.stacked_norms
) -> GradientReading:
    """Every row's gradient norms (unscaled by ``divisor``, the GradScaler's
    scale, where the gradients carry it), the count of its trainable
    parameters without a gradient, and with ``exact`` their non-finite
    counts. ``norms_of`` computes the norms (a distributed run's reduces
    over shards). Nothing here waits for the device."""
    col = Collector()
    params, rows, row_arr, present = layout
    if not params:
        return GradientReading(col, None, None)
    # Once per step for every parameter: list work, no per-row Python.
    grads = [p.grad for p in params]
    if any(map(is_, grads, repeat(None))):  # (not "None in grads": that calls Tensor.__eq__ on each)
        none = np.fromiter((g is None for g in grads), dtype=bool, count=len(grads))
        missing = np.bincount(row_arr, weights=none, minlength=int(present[-1]) + 1)[present]
        idx = np.flatnonzero(~none).tolist()
        params, rows, grads = [params[i] for i in idx], [rows[i] for i in idx], [grads[i] for i in idx]
        missing_rows = present[missing > 0]
    else:
        missing = np.zeros(len(present))
        rows = row_arr
        missing_rows = present[:0]
    col.const_many(present, Key.GRAD_MISSING, missing)
    if not params:
        return GradientReading(col, None, missing_rows)
    # A gradient that requires grad (create_graph=True) is measured detached.
    if any(map(_REQUIRES_GRAD, grads)):
        grads = [g.detach() if g.requires_grad else g for g in grads]
    # (divisor: divided on the device by the scale: unscaled norms, no sync)
    if divisor is not None and norms_of is stats.stacked_norms:
        norms, divisor = stats.unscaled_norms(grads, divisor), None
    else:
        norms = norms_of(grads)
    try:
        # One tensor kept (not thousands of 0-d ones, which would outlive
        # the step and wake Python's full garbage collection).
        if not isinstance(norms, torch.Tensor):
            norms = torch.stack(norms) if len(norms) > 1 else norms[0].reshape(1)
    except RuntimeError:  # on several devices (a model split across GPUs)
        col.add_many(norms, rows, Key.GRAD_NORM, divisor=divisor)
    else:
        col.add_stacked(norms, rows, Key.GRAD_NORM, divisor=divisor)
    if exact:
        col.add_many([stats.nonfinite_count(g) for g in grads], rows, Key.GRAD_NF)
    return GradientReading(col, (params, norms), missing_rows)


def snapshot_weights(layout: Layout, norms_of: Callable) -> tuple:
    """(params, rows, copies, norms) of the weights before an update."""
    with torch.no_grad():
        old = [p.detach().clone() for p in layout.params]
    return layout.params, layout.rows, old, norms_of(old)


def add_update_norms(col: Collector, snapshot: tuple, norms_of: Callable, lost: bool = True) -> None:
    """The update ratio's parts, ``||w_{t-1} - w_t||`` and ``||w_{t-1}||``,
    from a :func:`snapshot_weights` taken before the update; with ``lost``
    (the gradients in ``.grad`` are the ones this update used) also
    ``update_lost_frac``'s counts (:func:`stats.rounded_away`)."""
    params, rows, old, base = snapshot
    with torch.no_grad():
        # In place: the copy becomes w_{t-1} - w_t, no second buffer.
        stats.foreach_sub_(old, [p.detach() for p in params])
        col.add_many(norms_of(old), rows, Key.UPD_NORM)
        col.add_many(base, rows, Key.UPD_BASE)
        if lost:
            # (dense gradients only: a sparse one's absent rows are not
            # updates; after the norms: this overwrites the copy)
            idx = [i for i, p in enumerate(params)
                   if p.grad is not None and not p.grad.is_sparse and not old[i].is_sparse
                   and p.grad.shape == old[i].shape]
            if idx:
                graded, gone = stats.rounded_away([old[i] for i in idx], [params[i].grad for i in idx])
                at = [rows[i] for i in idx]
                col.add_many(graded, at, Key.UPD_GRADED)
                col.add_many(gone, at, Key.UPD_LOST)
