"""Facts of each step that only the training side sees, read on the host.

Three bugs leave per-layer statistics that look healthy: gradients that are
never cleared between steps, a module that runs with autograd off inside the
model's forward, and an optimizer that does not hold (or never moves) some
parameters. :class:`StepFacts` records what tells them apart, for the
diagnosis:

* ``grad_carried``: at the first backward of a step, the norm of each row's
  gradients still left from the previous step (``.grad`` was neither set to
  None nor zeroed in place since the last ``optimizer.step()``). Host-side
  except for the rare ambiguous case (a ``.grad`` whose tensor and version
  counter are unchanged since the step, e.g. zeroed through ``.data``), where
  one fused norm over those gradients decides. Recorded at the step only
  where those very tensors are still the gradients then: a backward that
  only passes through the model (a GAN's generator step through the
  discriminator) fills gradients that a ``zero_grad()`` drops before the
  model's own backward, and no update of the model sees them;
* ``ran_without_grad``: the module ran inside the model's forward while
  autograd was disabled;
* ``opt_group``, ``lr``, ``weight_decay``, ``momentum``: which param group
  holds each row's trainable parameters (-1: none) and that group's
  hyperparameters (momentum: SGD/RMSprop ``momentum``, else Adam's
  ``betas[0]``). Cached lists, rebuilt only when the groups or their values
  change: a quiet step costs a few dict reads per group and three list
  extensions.

Everything is added to the step's :class:`~.collector.Collector` as host
constants (or, for leftover gradients, 0-d device norms); nothing here waits
for the device.
"""

from __future__ import annotations

import math
import warnings
import weakref
from itertools import compress, count
from operator import attrgetter, eq
from typing import Callable

import numpy as np
import torch

from ..step import stats
from ..step.stats import Key

__all__ = ["StepFacts"]

_GRAD = attrgetter("grad")


def _version(t: torch.Tensor) -> int | None:
    try:
        return t._version
    except RuntimeError:  # inference tensors have no version counter
        return None


def _momentum(group: dict) -> float:
    m = group.get("momentum")
    if m is None:
        betas = group.get("betas")
        m = betas[0] if isinstance(betas, (tuple, list)) and betas else None
    return _number(m)


def _number(v) -> float:
    """A float for a hyperparameter; NaN when missing or on an accelerator
    (reading a CUDA tensor would wait for the device)."""
    if isinstance(v, torch.Tensor):
        return float(v) if v.device.type == "cpu" and v.numel() == 1 else math.nan
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return math.nan


class StepFacts:
    """The host-side facts of one watched model (see the module docstring).

    ``optimizer`` may be None (``record()`` mode): then only the gradient and
    autograd facts are recorded.
    """

    def __init__(self, optimizer=None):
        self.optimizer = optimizer
        self._checked = False  # leftover gradients checked in this step
        # (their norms, rows, and (parameter, weak reference to the gradient)
        # pairs: found at the step's first backward, recorded at its commit)
        self._carried: tuple | None = None
        self._no_grad_rows: set[int] = set()
        # After the last step: the parameters, and for each id(grad) (0: it
        # had none) and the gradient's _version. Plain ints, not weak
        # references: thousands of objects that live from one step to the
        # next made Python's full garbage collection run every few steps of a
        # large model. An id can be reused by a new
        # tensor once the old one is freed; before a step's backward writes
        # anything no new gradient exists, except the one whose accumulation
        # triggered the check (``fresh``), which is left out.
        self._marks: tuple[list, list, list] | None = None
        self._layout_key = None
        self._row_group: dict[int, int] = {}  # row -> param group (-1: none)
        self._values_key = None
        self._consts: tuple = ()
        # For check_stepped: the probe's version at the last backward, and
        # whether a step was recorded since.
        self._probe_version: int | None = None
        self._stepped = False
        self.warned_unstepped = False

    def check_stepped(self, probe, tag: Callable[[], str]) -> None:
        """At a backward's end: warn once when the weights changed since the
        last backward without the watched optimizer stepping (another
        optimizer steps the model, and nothing is recorded). The in-place
        version counter of ``probe`` (one trainable parameter) tells,
        without reading the weights; ``tag()`` names the process."""
        if self.warned_unstepped or self.optimizer is None or probe is None:
            return
        version = _version(probe)
        if version is None:
            return
        if self._probe_version is not None and not self._stepped and version != self._probe_version:
            self.warned_unstepped = True
            msg = (
                f"{tag()}: the model's weights changed but the watched optimizer "
                f"({type(self.optimizer).__name__}) did not step: is the model stepped by "
                "another optimizer? No step is recorded until the watched one steps"
            )
            warnings.warn(msg, RuntimeWarning, stacklevel=2)
        self._probe_version = version
        self._stepped = False

    def stepped(self) -> None:
        """A step was recorded (the weights may change before the next backward)."""
        self._stepped = True

    def release(self) -> None:
        """Drop the optimizer and what refers to the model (after remove())."""
        self.optimizer = None
        self._marks = self._carried = None
        self._row_group = {}
        self._layout_key = self._values_key = None

    # -- from the hooks -----------------------------------------------------

    def ran_without_grad(self, row: int) -> None:
        """A watched module ran inside the forward with autograd disabled."""
        self._no_grad_rows.add(row)

    @property
    def no_grad_rows(self) -> frozenset:
        """The rows :meth:`ran_without_grad` noted in this step so far."""
        return frozenset(self._no_grad_rows)

    @property
    def unchecked(self) -> bool:
        """The leftover gradients of this step are still to be checked."""
        return not self._checked

    def before_backward(self, col, params, rows, fresh=None) -> None:
        """At the first backward of a step: the gradients left over from the
        previous one (``params``/``rows``: the trainable parameters and their
        rows; ``fresh``: a parameter whose gradient this backward has just
        written, not checked). Later backwards of the same step (gradient
        accumulation on purpose) are not checked."""
        if self._checked:
            return
        self._checked = True
        marks = self._marks
        if marks is None:
            return
        was, ids, versions = marks
        if was is not params and (len(was) != len(params) or any(a is not b for a, b in zip(was, params))):
            # Another set of parameters (one frozen or added since): by identity.
            at = {id(p): i for i, p in enumerate(was)}
            pick = [at.get(id(p)) for p in params]
            ids = [ids[i] if i is not None else 0 for i in pick]
            versions = [versions[i] if i is not None else None for i in pick]
        left, left_rows, held = [], [], []
        # A gradient that is still the very tensor the last step left, not
        # modified since (None, after zero_grad(), never matches: its mark
        # is 0). This runs at every step for every parameter: one pass of
        # C-level iteration.
        grads = list(map(_GRAD, params))
        for i in compress(count(), map(eq, map(id, grads), ids)):
            g = grads[i]
            if params[i] is not fresh and versions[i] == _version(g):
                left.append(g.detach())
                left_rows.append(rows[i])
                held.append((params[i], weakref.ref(g)))
        if left:
            # Judged at the step (commit): a backward that only passes
            # through this model (a GAN's generator step through the
            # discriminator) fills gradients that zero_grad() drops before
            # the model's own backward, and no update of the model sees them.
            self._carried = (stats.foreach_norm(left), left_rows, held)

    # -- at the step's end ----------------------------------------------------

    def commit(self, col, params, rows) -> None:
        """Add this step's facts to ``col``; remember the gradients as the
        step left them."""
        for r in self._no_grad_rows:
            col.const(r, Key.RAN_NO_GRAD, 1.0)
        self._no_grad_rows = set()
        self._checked = False
        if self._carried is not None:
            # carried into this step's update: still the very tensors found
            # left over (set to None by a zero_grad() since: not carried)
            norms, left_rows, held = self._carried
            self._carried = None
            kept = [i for i, (p, ref) in enumerate(held) if ref() is not None and ref() is p.grad]
            if kept:
                col.add_many([norms[i] for i in kept], [left_rows[i] for i in kept], Key.GRAD_CARRIED)
        grads = [p.grad for p in params]
        ids = [0 if g is None else id(g) for g in grads]
        try:  # (one list pass: this runs for every parameter at every step)
            versions = [None if g is None else g._version for g in grads]
        except RuntimeError:  # an inference tensor has no version counter
            versions = [None if g is None else _version(g) for g in grads]
        self._marks = (params, ids, versions)
        if self.optimizer is not None and rows:
            col.c_arrays.append(self._group_consts(params, rows))

    def _group_consts(self, params, rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, keys, values) of every row's group and hyperparameters,
        as arrays built again only when the groups or their values change
        (read-only: the same arrays travel with every step's packet)."""
        groups = self.optimizer.param_groups
        layout = (len(params), tuple((id(g["params"]), len(g["params"])) for g in groups))
        if layout != self._layout_key:
            self._layout_key = layout
            self._row_group = self._layout(groups, params, rows)
            self._values_key = None
        values = tuple((_number(g.get("lr")), _number(g.get("weight_decay")), _momentum(g)) for g in groups)
        if values != self._values_key:
            self._values_key = values
            c_rows, c_keys, c_vals = [], [], []
            for r, gi in self._row_group.items():
                hyper = values[gi] if gi >= 0 else ()
                for key, v in zip((Key.OPT_GROUP, Key.OPT_LR, Key.OPT_WD, Key.OPT_MOMENTUM), (gi,) + hyper):
                    # A hyperparameter the group does not have gets no slot
                    # (its column is NaN all the same): a step's host values
                    # are then non-finite only where a measured value is,
                    # which keeps a batch as a non-finite one's (batches.py)
                    # and switches nonfinite="every_step" to exact counts.
                    if not math.isnan(v):
                        c_rows.append(r)
                        c_keys.append(key)
                        c_vals.append(float(v))
            arrays = (np.asarray(c_rows, dtype=np.int64), np.asarray(c_keys, dtype=np.int64),
                      np.asarray(c_vals, dtype=np.float64))
            for a in arrays:
                a.flags.writeable = False
            self._consts = arrays
        return self._consts

    @staticmethod
    def _layout(groups, params, rows) -> dict[int, int]:
        """Row -> the group holding its trainable parameters: the one with the
        lowest learning rate among them (a group that does not move them is
        the one to report), -1 when no group holds any."""
        group_of = {}
        for gi, g in enumerate(groups):
            for p in g["params"]:
                group_of.setdefault(id(p), gi)
        lrs = [_number(g.get("lr")) for g in groups]
        out: dict[int, int] = {}
        for p, r in zip(params, rows):
            gi = group_of.get(id(p), -1)
            cur = out.get(r)
            if cur is None or cur < 0 or (gi >= 0 and lrs[gi] < lrs[cur]):
                out[r] = gi if cur is None or gi >= 0 else cur
        return out
