"""Hooks on a model that produce one on-device statistics vector per step.

:class:`Instrument` owns every hook it installs (forward hooks, parameter
post-accumulate-grad hooks, optimizer step hooks, the GradScaler wrapper) and
hands one :class:`StepPacket` per training step to a sink (the writer's worker
thread). Nothing in a hook waits for the device: statistics are 0-d/1-d
tensors collected during the step, concatenated once at the step's end and
copied to the host once (non-blocking into pinned memory on CUDA).

Which modules become rows, and what is measured for each, comes from one table
(:data:`MODULE_TABLE`), looked up along the module's class hierarchy.
"""

from __future__ import annotations

import collections
import fnmatch
import logging
import math
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from ..format import metadata
from . import stats as S
from .stats import Key

__all__ = [
    "Behaviour",
    "MODULE_TABLE",
    "behaviour_of",
    "WatchConfig",
    "StepPacket",
    "Instrument",
    "select_modules",
    "first_tensor",
    "iter_tensors",
    "unwrap",
]

log = logging.getLogger("tb_neuraldbg")


# --------------------------------------------------------------------------
# Behaviour by module type
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Behaviour:
    """What to do with a module of a given type.

    watch: watched by default (False for modules that only move data around).
    atomic: the module does its work without calling its children as modules
        (``nn.MultiheadAttention`` never calls ``out_proj``): its children are
        not rows of their own and their parameters belong to it.
    dead: the dead-unit fraction of the output is meaningful (exact zeros).
    saturation: ``module -> (lo, hi)``: outputs ``<= lo`` or ``>= hi`` are in
        the flat part of a bounded activation; ``lo=None``: only the top end
        counts (ReLU6, Hardtanh(0, ...): the zeros are the dead side).
    pointwise: an elementwise activation without parameters that maps finite
        values to finite values. On cheap steps, when its input is the
        previous row's output, it is not measured again: its non-finite flag
        is its input's.
    """

    watch: bool = True
    atomic: bool = False
    dead: bool = False
    saturation: Callable[[nn.Module], tuple[float, float]] | None = None
    pointwise: bool = False


_SKIP = Behaviour(watch=False)


def _hardtanh_bounds(m: nn.Module) -> tuple[float | None, float]:
    lo, hi = float(m.min_val), float(m.max_val)
    # A 0 lower bound is a clipped ReLU: its zeros are dead, not saturated.
    return (None if lo == 0 else lo), hi


def _version_of(t: torch.Tensor) -> int | None:
    """The in-place version counter; None for inference tensors (which
    cannot be modified in place outside inference mode)."""
    try:
        return t._version
    except RuntimeError:
        return None
# Looked up along the MRO, so subclasses (ReLU6 < Hardtanh, user subclasses of
# Linear) inherit their parent's entry; a miss means Behaviour(): watched when
# the module does work itself (a leaf, or it has parameters of its own).
MODULE_TABLE: dict[type, Behaviour] = {
    nn.Identity: _SKIP,
    nn.Dropout: _SKIP,
    nn.Dropout1d: _SKIP,
    nn.Dropout2d: _SKIP,
    nn.Dropout3d: _SKIP,
    nn.AlphaDropout: _SKIP,
    nn.FeatureAlphaDropout: _SKIP,
    nn.Flatten: _SKIP,
    nn.Unflatten: _SKIP,
    nn.MultiheadAttention: Behaviour(atomic=True),
    nn.RNNBase: Behaviour(atomic=True),
    nn.ReLU: Behaviour(dead=True, pointwise=True),
    nn.Threshold: Behaviour(dead=True, pointwise=True),
    nn.Hardswish: Behaviour(dead=True, pointwise=True),
    nn.Tanh: Behaviour(saturation=lambda m: (-0.99, 0.99), pointwise=True),
    nn.Softsign: Behaviour(saturation=lambda m: (-0.99, 0.99), pointwise=True),
    nn.Sigmoid: Behaviour(saturation=lambda m: (0.01, 0.99), pointwise=True),
    nn.Hardsigmoid: Behaviour(saturation=lambda m: (0.0, 1.0), pointwise=True),
    nn.Hardtanh: Behaviour(saturation=lambda m: _hardtanh_bounds(m), pointwise=True),
    nn.ReLU6: Behaviour(dead=True, saturation=lambda m: (None, 6.0), pointwise=True),
    **{
        cls: Behaviour(pointwise=True)
        for cls in (
            nn.LeakyReLU, nn.ELU, nn.SELU, nn.CELU, nn.GELU, nn.SiLU, nn.Mish, nn.Softplus,
            nn.LogSigmoid, nn.Tanhshrink, nn.Softshrink, nn.Hardshrink,
        )
    },
}


def behaviour_of(module: nn.Module) -> Behaviour:
    """The table entry for ``module``'s class or its nearest base class."""
    for cls in type(module).__mro__:
        b = MODULE_TABLE.get(cls)
        if b is not None:
            return b
    return Behaviour()


# --------------------------------------------------------------------------
# Module selection and names
# --------------------------------------------------------------------------

_WRAPPERS = (nn.DataParallel, nn.parallel.DistributedDataParallel)


def _is_wrapper(m: nn.Module) -> bool:
    return isinstance(m, _WRAPPERS) or (
        type(m).__name__ == "OptimizedModule" and isinstance(getattr(m, "_orig_mod", None), nn.Module)
    )


def unwrap(model: nn.Module) -> nn.Module:
    """The user's model inside DataParallel / DDP (``.module``) and
    torch.compile (``._orig_mod``) wrappers, so names match the user's."""
    while _is_wrapper(model):
        model = model.module if isinstance(model, _WRAPPERS) else model._orig_mod
    return model


def _walk(module: nn.Module, prefix: str, seen: set):
    """(name, module) depth first; wrapper levels add no name segment."""
    if id(module) in seen:
        return
    seen.add(id(module))
    yield prefix, module
    if behaviour_of(module).atomic:
        return
    skip = _is_wrapper(module)
    for name, child in module.named_children():
        yield from _walk(child, prefix if skip else (f"{prefix}.{name}" if prefix else name), seen)


def _does_work(m: nn.Module) -> bool:
    # A leaf computes; a composite computes itself when it has parameters of
    # its own or the table says its children are part of it. Other
    # composites (Sequential, TransformerEncoderLayer, user blocks) are
    # containers: their children are the rows.
    if _is_wrapper(m):
        return False
    b = behaviour_of(m)
    return b.atomic or next(m.children(), None) is None or next(m.parameters(recurse=False), None) is not None


def _matches(name: str, module: nn.Module, patterns) -> bool:
    for p in patterns:
        if isinstance(p, type):
            if isinstance(module, p):
                return True
        elif fnmatch.fnmatchcase(name, str(p)):
            return True
    return False


def _as_list(x) -> list:
    if x is None:
        return []
    if isinstance(x, (str, type)):
        return [x]
    return list(x)


def select_modules(model: nn.Module, include=None, exclude=None, max_layers: int | None = 256):
    """The modules to watch, as ``[(name, module)]`` in definition order.

    Default: every module that does work itself (see ``_does_work``), minus
    the table's skipped types (Dropout, Identity, Flatten). ``include``: name
    patterns (fnmatch, e.g. ``"encoder.layers.*"``) or module types; only
    matching working modules are watched (skipped types too, when named).
    ``exclude``: the same, removed afterwards. Above ``max_layers`` modules an
    evenly spaced subset is kept (first and last included) with a warning.
    """
    root = unwrap(model)
    include, exclude = _as_list(include), _as_list(exclude)
    found = []
    for name, m in _walk(root, "", set()):
        if not _does_work(m):
            continue
        name = name or type(m).__name__  # the model itself is a single layer
        if include:
            if not _matches(name, m, include):
                continue
        elif not behaviour_of(m).watch:
            continue
        if exclude and _matches(name, m, exclude):
            continue
        found.append((name, m))
    if max_layers is not None and len(found) > max_layers:
        keep = sorted(set(np.linspace(0, len(found) - 1, max_layers).round().astype(int).tolist()))
        warnings.warn(
            f"tb_neuraldbg: the model has {len(found)} modules to watch; watching "
            f"{len(keep)} evenly spaced ones (max_layers={max_layers}). Choose with "
            f"watch(include=..., exclude=...) or raise max_layers.",
            stacklevel=3,
        )
        found = [found[i] for i in keep]
    return found


def _owned_params(m: nn.Module) -> list[nn.Parameter]:
    recurse = behaviour_of(m).atomic or next(m.children(), None) is None
    return [p for p in m.parameters(recurse=recurse) if p.requires_grad]


def iter_tensors(*objs, depth: int = 0):
    """Every tensor in (nested) argument structures."""
    for obj in objs:
        if isinstance(obj, torch.Tensor):
            yield obj
        elif depth < 4 and isinstance(obj, (list, tuple)):
            yield from iter_tensors(*obj, depth=depth + 1)
        elif depth < 4 and isinstance(obj, dict):
            yield from iter_tensors(*obj.values(), depth=depth + 1)


def first_tensor(obj, depth: int = 0):
    """First tensor in a (nested) output/argument structure, depth first."""
    if isinstance(obj, torch.Tensor):
        return obj
    if type(obj) is tuple and obj and isinstance(obj[0], torch.Tensor):
        return obj[0]  # the common case: forward(x, ...)
    if depth > 4:
        return None
    if isinstance(obj, (list, tuple)):
        items = obj
    elif isinstance(obj, dict):
        items = obj.values()
    else:
        return None
    for o in items:
        t = first_tensor(o, depth + 1)
        if t is not None:
            return t
    return None


# --------------------------------------------------------------------------
# Settings and schedules
# --------------------------------------------------------------------------


@dataclass
class WatchConfig:
    """The knobs of ``DebugWriter.watch`` and the schedules they define.

    stats_every: full activation statistics (std, max |x|, zero/dead/
        saturated fractions) and weight norms every this many steps, and at
        every step below ``stats_every`` (a model born broken shows at step
        0). Gradient norms, the activation mean and non-finite flags, the
        batch's mean/std/max |x|, loss, learning rate and scale are measured
        at every step.
    update_every: update ratios ||w_t - w_{t-1}|| / ||w_{t-1}|| every this
        many steps and at every step below ``stats_every``: each one costs a
        transient copy of the weights, so it is rarer than the other
        statistics (0 = never, e.g. for a model that barely fits in memory).
    hist_every: activation histograms every this many steps (0 = never),
        thinned with the write stride (see ``hist_interval``).
    full_steps: every step is written below this step; above it the write
        stride doubles with each doubling of the step (``stride``).
    ring: rows kept on the worker before they are written or dropped: the
        ``ring`` steps before and after an event are always written.
    """

    include: Any = None
    exclude: Any = None
    max_layers: int | None = 256
    stats_every: int = 10
    update_every: int = 100
    hist_every: int = 100
    full_steps: int = 2000
    ring: int = 32
    on_error: str = "warn"
    thresholds: Any = None
    start_step: int = 0
    save_batches: bool = True

    def __post_init__(self):
        for name in ("stats_every", "full_steps", "ring"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        for name in ("update_every", "hist_every"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an int >= 0 (0 = never), got {v!r}")
        if self.on_error not in ("warn", "raise"):
            raise ValueError(f"on_error must be 'warn' or 'raise', got {self.on_error!r}")
        if self.max_layers is not None and self.max_layers < 1:
            raise ValueError(f"max_layers must be >= 1 or None, got {self.max_layers!r}")

    def is_stats(self, step: int) -> bool:
        return step < self.stats_every or step % self.stats_every == 0

    def is_update(self, step: int) -> bool:
        return self.update_every > 0 and (step < self.stats_every or step % self.update_every == 0)

    def _octave(self, step: int) -> int:
        return 0 if step < 2 * self.full_steps else int(math.log2(step / self.full_steps))

    def stride(self, step: int) -> int:
        """Write stride at ``step``: 1 below ``full_steps``, then
        ``stats_every * 2**k`` for steps in ``[2**k, 2**(k+1)) * full_steps``:
        ``full_steps / stats_every`` rows per doubling, all of them full
        statistics steps."""
        if step < self.full_steps:
            return 1
        return self.stats_every * (1 << self._octave(step))

    def is_written(self, step: int) -> bool:
        return step % self.stride(step) == 0

    def hist_interval(self, step: int) -> int:
        return self.hist_every * (1 << self._octave(step)) if step >= self.full_steps else self.hist_every

    def is_hist(self, step: int) -> bool:
        return self.hist_every > 0 and step % self.hist_interval(step) == 0


# --------------------------------------------------------------------------
# One step's data
# --------------------------------------------------------------------------


@dataclass
class StepPacket:
    """Everything the worker needs for one step.

    ``values`` (after :meth:`host_values`) are the step vector; ``rows`` and
    ``keys`` describe each value (see :class:`stats.Key`); ``layers`` is the
    full layer list at this step (it only grows).
    """

    step: int
    rows: np.ndarray
    keys: np.ndarray
    layers: list
    stats: bool
    _host: list = field(default_factory=list)  # numpy arrays, or (pinned, event)

    def host_values(self) -> np.ndarray:
        parts = []
        for p in self._host:
            if isinstance(p, tuple):  # CUDA: wait on the worker, not in training
                pinned, event = p
                event.synchronize()
                parts.append(pinned.numpy().astype(np.float64))
            else:
                parts.append(np.asarray(p, dtype=np.float64))
        return np.concatenate(parts) if parts else np.zeros(0)


class _Collector:
    """Device values of one step, grouped by device, with their descriptions.

    Single values (0-d tensors, the bulk: one or more per hook call) are kept
    as they are and stacked once per device and dtype in :meth:`finish`:
    no per-value reshape. Runs (histograms) and pre-stacked groups are kept
    as 1-d tensors.
    """

    __slots__ = ("by_device", "c_rows", "c_keys", "c_vals")

    def __init__(self):
        # device -> (scalar tensors, their rows, their keys, 1-d runs, rows, keys)
        self.by_device: dict[torch.device, tuple[list, list, list, list, list, list]] = {}
        self.c_rows: list[int] = []
        self.c_keys: list[int] = []
        self.c_vals: list[float] = []

    def _slot(self, dev):
        d = self.by_device.get(dev)
        if d is None:
            d = self.by_device[dev] = ([], [], [], [], [], [])
        return d

    def add(self, t: torch.Tensor, row: int, key: int) -> None:
        d = self._slot(t.device)
        d[0].append(t if t.dim() == 0 else t.reshape(()))
        d[1].append(row)
        d[2].append(key)

    def add_run(self, t: torch.Tensor, row: int, key: int) -> None:
        d = self._slot(t.device)
        d[3].append(t.reshape(-1))
        n = t.numel()
        d[4].extend([row] * n)
        d[5].extend([key] * n)

    def add_many(
        self, tensors: Sequence[torch.Tensor], rows: Sequence[int], key: int, divisor: torch.Tensor | None = None
    ) -> None:
        """0-d tensors (e.g. per-parameter norms), stacked per device: one
        kernel per device instead of one entry each; ``divisor`` (a 0-d
        tensor, e.g. the GradScaler scale) divides them all at once."""
        if divisor is None:
            for t, r in zip(tensors, rows):
                d = self._slot(t.device)
                d[0].append(t if t.dim() == 0 else t.reshape(()))
                d[1].append(r)
                d[2].append(key)
            return
        groups: dict[torch.device, tuple[list, list]] = {}
        for t, r in zip(tensors, rows):
            ts, rs = groups.setdefault(t.device, ([], []))
            ts.append(t)
            rs.append(r)
        for dev, (ts, rs) in groups.items():
            v = torch.stack(ts) if len(ts) > 1 else ts[0].reshape(1)
            v = v / divisor.to(dev)
            d = self._slot(dev)
            d[3].append(v.reshape(-1))
            d[4].extend(rs)
            d[5].extend([key] * len(rs))

    def const(self, row: int, key: int, value: float) -> None:
        self.c_rows.append(row)
        self.c_keys.append(key)
        self.c_vals.append(float(value))

    def extend(self, other: "_Collector") -> None:
        for dev, parts in other.by_device.items():
            d = self._slot(dev)
            for mine, theirs in zip(d, parts):
                mine.extend(theirs)
        self.c_rows.extend(other.c_rows)
        self.c_keys.extend(other.c_keys)
        self.c_vals.extend(other.c_vals)

    def finish(self) -> tuple[list, np.ndarray, np.ndarray]:
        """One concatenation and one host copy per device; no waiting."""
        host, rows, keys = [], [], []
        for dev, (sts, srs, sks, rts, rrs, rks) in self.by_device.items():
            wide = dev.type in ("cpu", "cuda")  # float64: counts above 2**24 stay exact
            flat_parts: list[torch.Tensor] = []
            if sts:
                by_dtype: dict[torch.dtype, list[int]] = {}
                for i, t in enumerate(sts):
                    by_dtype.setdefault(t.dtype, []).append(i)
                if len(by_dtype) == 1:
                    flat_parts.append(torch.stack(sts))
                    rows.extend(srs)
                    keys.extend(sks)
                else:
                    for idxs in by_dtype.values():
                        v = torch.stack([sts[i] for i in idxs])
                        flat_parts.append(v.to(torch.float64) if wide else v)
                        rows.extend(srs[i] for i in idxs)
                        keys.extend(sks[i] for i in idxs)
            if rts:
                flat_parts.extend(rts)
                rows.extend(rrs)
                keys.extend(rks)
            if not flat_parts:
                continue
            if wide:
                flat_parts = [f if f.dtype == torch.float64 else f.to(torch.float64) for f in flat_parts]
            flat = torch.cat(flat_parts) if len(flat_parts) > 1 else flat_parts[0]
            if dev.type == "cuda":
                pinned = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True)
                pinned.copy_(flat, non_blocking=True)
                event = torch.cuda.Event()
                event.record()
                host.append((pinned, event))
            else:
                host.append(flat.detach().cpu().numpy())
        host.append(np.asarray(self.c_vals, dtype=np.float64))
        rows.extend(self.c_rows)
        keys.extend(self.c_keys)
        return host, np.asarray(rows, dtype=np.int64), np.asarray(keys, dtype=np.int64)


# --------------------------------------------------------------------------
# The instrument
# --------------------------------------------------------------------------


def _raise(e: BaseException) -> None:
    raise e


def _foreach_sub_(xs: list, ys: list) -> None:
    """xs[i] -= ys[i], batched where torch has the private foreach op."""
    try:
        torch._foreach_sub_(xs, ys)
    except Exception:  # noqa: BLE001 -- missing op or mixed devices
        for x, y in zip(xs, ys):
            x.sub_(y)


class Instrument:
    """Every hook on one model (and its optimizer, criterion, scaler).

    ``sink(packet)`` receives one :class:`StepPacket` per recorded step, on
    the training thread; it must only enqueue. With an optimizer a step is
    recorded at each ``optimizer.step()`` (at each ``scaler.update()`` when a
    GradScaler is given, since the scaler may skip the optimizer step);
    without one, at each :meth:`record`.
    """

    def __init__(
        self,
        model: nn.Module,
        sink: Callable[[StepPacket], None],
        config: WatchConfig,
        optimizer: torch.optim.Optimizer | None = None,
        criterion: Any = None,
        scaler: Any = None,
    ):
        self.model = model
        self.root = unwrap(model)
        self.sink = sink
        self.config = config
        self.optimizer = optimizer
        self.criterion = criterion if isinstance(criterion, nn.Module) else None
        if criterion is not None and self.criterion is None:
            warnings.warn(
                "tb_neuraldbg: criterion is not an nn.Module and cannot be hooked; "
                "pass the loss with writer.record(loss=loss) for the <loss> row",
                stacklevel=3,
            )
        self.scaler = scaler
        self.step = int(config.start_step)
        # Set by the worker (another thread) when it sees non-finite values:
        # from then on non-finite values are counted exactly at every step.
        self.exact_nonfinite = False
        self.pending_failure: BaseException | None = None
        # K of a K-class cross-entropy criterion (the logits' class dim), for
        # the diagnosis' initial-loss check (ln K); None when unknown.
        self.num_classes: int | None = None
        self._handles: list = []
        self._broken: set[str] = set()
        self._removed = False
        self._sched_step: int | None = None  # see _schedule
        self._sched_stats = self._sched_hist = False

        self.layers: list[dict] = [{"name": metadata.PSEUDO_INPUT, "type": "input"}]
        self._loss_row: int | None = None
        self._opt_row: int | None = None
        # Keyed by the watched module's name: DataParallel calls replicas
        # (new module objects every step) that carry the same hooks.
        self._row_of: dict[str, int] = {}
        self._params_of_row: dict[int, list[nn.Parameter]] = {}
        self._watched = select_modules(model, config.include, config.exclude, config.max_layers)
        # (step, args, kwargs) of recent batches, by reference (see _keep_batch)
        self._batches: collections.deque = collections.deque()
        self._batch_bytes: collections.deque = collections.deque()
        self._suspect_batch: tuple | None = None
        self._reset_iteration()

        self._install()

    # -- iteration state --------------------------------------------------

    def _reset_iteration(self) -> None:
        self._col = _Collector()
        # Gradients w.r.t. module outputs, from tensor hooks during backward.
        self._gout_col = _Collector()
        self._gout_sums: list[torch.Tensor] = []
        self._gout_rows: list[int] = []
        self._seen_rows: set[int] = set()
        self._input_done = False
        self._threads: int | None = None  # torch.get_num_threads(), read at the step's input
        # (weakref to the last measured output, its row, its _version then)
        self._prev_out: tuple[Any, int, int | None] | None = None
        self._grad_col: _Collector | None = None
        self._loss: torch.Tensor | None = None
        self._backward_queued = False
        # (params, rows, copies, norms) taken before an update; see _commit.
        self._upd_snapshot: tuple | None = getattr(self, "_next_upd_snapshot", None)
        self._next_upd_snapshot = None

    # -- installation -----------------------------------------------------

    def _install(self) -> None:
        h = self._handles
        h.append(self.root.register_forward_pre_hook(self._on_model_input, with_kwargs=True))
        params_done: set[int] = set()
        self._params_pending: dict[int, list[nn.Parameter]] = {}
        for name, m in self._watched:
            h.append(m.register_forward_hook(self._make_forward_hook(name, m), with_kwargs=True))
            owned = [p for p in _owned_params(m) if id(p) not in params_done]
            params_done.update(id(p) for p in owned)
            self._params_pending[id(m)] = owned
            for p in owned:
                h.append(p.register_post_accumulate_grad_hook(self._on_grad_accumulated))
        if self.criterion is not None:
            h.append(self.criterion.register_forward_hook(self._on_loss, with_kwargs=True))
        if self.optimizer is not None:
            h.append(self.optimizer.register_step_pre_hook(self._on_step_pre))
            h.append(self.optimizer.register_step_post_hook(self._on_step_post))
        if self.scaler is not None:
            original = self.scaler.update
            instrument = weakref.ref(self)

            def update(*args, **kwargs):
                inst = instrument()
                if inst is not None:
                    inst._guard("scaler", inst._commit)  # before the scale changes
                return original(*args, **kwargs)

            self._scaler_update = update
            # GradScaler has no hook API: shadow the bound method on this
            # instance only, and restore it in remove().
            self.scaler.update = update

    def remove(self) -> None:
        """Remove every hook and the scaler wrapper. Safe to call twice."""
        if self._removed:
            return
        self._removed = True
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self.scaler is not None and self.scaler.__dict__.get("update") is self._scaler_update:
            del self.scaler.update
        self._col = _Collector()
        self._gout_col = _Collector()
        self._gout_sums, self._gout_rows = [], []
        self._grad_col = None
        self._upd_snapshot = self._next_upd_snapshot = None

    def release(self) -> None:
        """Drop the references to recent batches (after the worker is done
        with the steps that might need them) and, once the hooks are off, to
        the model, its parameters, the optimizer, criterion and scaler: a
        handle or writer kept after close() must not keep them alive."""
        self._batches.clear()
        self._batch_bytes.clear()
        self._suspect_batch = None
        if self._removed:
            self.model = self.root = None
            self.optimizer = self.criterion = self.scaler = None
            self._watched = []
            self._params_of_row = {}
            self._params_pending = {}
            self._prev_out = None
            self._loss = None

    @property
    def removed(self) -> bool:
        return self._removed

    # -- failure handling -------------------------------------------------

    def _guard(self, part: str, fn, *args):
        """Run a hook body; a failure is warned once and switches the part off.

        Monitoring must never break training: the user's loop continues with
        less data. The TrainingFailure of on_error="raise" is raised outside.
        """
        if part in self._broken or self._removed:
            return None
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 -- anything, by design
            self._broken.add(part)
            msg = f"tb_neuraldbg: monitoring of the {part} failed and is switched off: {type(e).__name__}: {e}"
            warnings.warn(msg, RuntimeWarning, stacklevel=2)
            log.warning(msg)
            return None

    def _raise_pending(self) -> None:
        failure = self.pending_failure
        if failure is not None:
            self.pending_failure = None
            raise failure

    # -- rows -------------------------------------------------------------

    def _row_for(self, name: str, m: nn.Module) -> int:
        row = self._row_of.get(name)
        if row is None:
            row = len(self.layers)
            self.layers.append({"name": name, "type": type(m).__name__})
            self._row_of[name] = row
            self._params_of_row[row] = self._params_pending.get(id(m), [])
        return row

    def _param_rows(self) -> tuple[list[nn.Parameter], list[int]]:
        """The watched parameters that require grad *now* (a parameter
        frozen after watch() is left out: no gradient is expected of it)."""
        params, rows = [], []
        for row, ps in self._params_of_row.items():
            for p in ps:
                if p.requires_grad:
                    params.append(p)
                    rows.append(row)
        return params, rows

    # -- forward ----------------------------------------------------------

    def _on_model_input(self, module, args, kwargs):
        self._raise_pending()
        if self._input_done or not torch.is_grad_enabled():
            return None
        self._input_done = True
        self._threads = torch.get_num_threads()  # once a step, for one_thread
        self._guard("input", self._measure_input, args, kwargs)
        return None

    def _measure_input(self, args, kwargs) -> None:
        if self.config.save_batches:
            self._keep_batch(args, kwargs)
        x = first_tensor(args) if args else None
        if x is None:
            x = first_tensor(kwargs)
        if x is None or x.is_complex() or x.numel() == 0:
            return
        if x.is_floating_point():
            # The first module usually gets this very tensor: it then reuses
            # these statistics instead of reading the batch again.
            self._prev_out = (weakref.ref(x), 0, _version_of(x))
        x = x.detach()
        with S.one_thread(x, threads=self._threads):
            self._measure_batch(x)

    def _measure_batch(self, x: torch.Tensor) -> None:
        col = self._col
        # Every step: min/max/sum/norm (a bad batch is found at its step);
        # the zero count on full-statistics steps.
        xf = S._float_view(x)
        acc = S._acc(xf)
        mn, mx = torch.aminmax(xf)
        col.add(mn, 0, Key.OUT_MIN)
        col.add(mx, 0, Key.OUT_MAX)
        col.add(xf.sum(dtype=acc), 0, Key.OUT_SUM)
        col.add(torch.linalg.vector_norm(xf, dtype=acc), 0, Key.OUT_NORM)
        if self.config.is_stats(self.step):
            col.add(S.nonzero_count(xf), 0, Key.OUT_NZ)
        if self.exact_nonfinite:
            col.add(S.nonfinite_count(x), 0, Key.OUT_NF)
        col.const(0, Key.OUT_N, x.numel())

    # Batches are kept by reference (no copy) so the worker can save the one
    # an event points at. The worker may lag behind training by a few steps
    # (small models step faster than it analyses): keep up to _KEEP_MAX
    # batches while they hold under _KEEP_BYTES together, and at least 2.
    _KEEP_MAX = 32
    _KEEP_BYTES = 64 * 2**20

    def _keep_batch(self, args, kwargs) -> None:
        size = sum(t.numel() * t.element_size() for t in iter_tensors(args, kwargs))
        self._batches.append((self.step, args, kwargs))
        self._batch_bytes.append(size)
        while len(self._batches) > 2 and (
            len(self._batches) > self._KEEP_MAX or sum(self._batch_bytes) > self._KEEP_BYTES
        ):
            self._batches.popleft()
            self._batch_bytes.popleft()

    def _make_forward_hook(self, name: str, m: nn.Module):
        behaviour = behaviour_of(m)
        instrument = weakref.ref(self)

        def hook(module, args, kwargs, output):
            inst = instrument()
            if inst is None or not torch.is_grad_enabled():
                return None
            # The watched module itself (not a DataParallel replica) names the row.
            inst._guard("forward", inst._measure_module, name, m, behaviour, args, kwargs, output)
            return None

        return hook

    def _measure_module(self, name, module, behaviour: Behaviour, args, kwargs, output) -> None:
        row = self._row_for(name, module)
        if row in self._seen_rows:
            return  # measured at its first call of the step (weight sharing, loops)
        self._seen_rows.add(row)
        x = first_tensor(args) if args else None
        if x is None and kwargs:
            x = first_tensor(kwargs)
        if x is not None and not (x.is_floating_point() and x.numel() > 0):
            x = None
        y = first_tensor(output)
        if y is not None and not (y.is_floating_point() and y.numel() > 0):
            y = None
        same_as_prev = False
        if x is not None:
            prev = self._prev_out
            # The very tensor the previous row output, not modified in place
            # since it was measured: its statistics are this input's. (An
            # in-place module, whose output is its input, has changed it
            # itself: the previous row's statistics are still its input's.)
            same_as_prev = (
                prev is not None and prev[0]() is x and (y is x or _version_of(x) == prev[2])
            )
            if same_as_prev:
                self._col.const(row, Key.IN_REF, prev[1])  # same tensor: reuse its statistics
                x = None
        if y is not None:
            self._prev_out = (weakref.ref(y), row, _version_of(y))
        if self._sched_step != self.step:
            self._schedule()
        # One intra-op thread for small CPU tensors (see stats.one_thread),
        # decided inline: this runs for every module at every step.
        threads = self._threads
        switch = threads is not None and threads > 1
        if (
            x is None
            and same_as_prev
            and behaviour.pointwise
            and not (self._sched_stats or self._sched_hist or self.exact_nonfinite)
        ):
            switch = False  # the output is not measured (see _measure_out): no reduction
        if switch:
            big = False
            for t in (x, y):
                if t is None:
                    continue
                n = t.numel()
                if n >= S.SMALL or t.device.type != "cpu":
                    switch = False
                    break
                big = big or n >= S._GRAIN
            switch = switch and big
        if switch:
            torch.set_num_threads(1)
        try:
            if x is not None:
                self._measure_in(row, x.detach())
            if y is not None:
                self._measure_out(row, module, behaviour, y.detach(), same_as_prev)
        finally:
            if switch:
                torch.set_num_threads(threads)
        if y is not None and y.requires_grad and not y.is_leaf:
            # A leaf (a parameter returned as is) would keep the hook beyond
            # the step; a non-leaf's hook dies with its graph.
            y.register_hook(self._make_gout_hook(row))

    def _schedule(self) -> None:
        """This step's schedule, computed once per step (not per hook)."""
        step = self.step
        self._sched_step = step
        self._sched_stats = self.config.is_stats(step)
        self._sched_hist = self.config.is_hist(step)

    def _measure_in(self, row: int, x: torch.Tensor) -> None:
        """A module's first input (not the previous row's output)."""
        col = self._col
        col.add(S.flag_moment(x), row, Key.IN_SUM)
        if self._sched_stats:
            col.const(row, Key.IN_N, x.numel())
            if x.dim() >= 2:
                nz, dead = S.zero_and_dead(x)
                col.add(nz, row, Key.IN_NZ)
                col.add(dead, row, Key.IN_DEAD)
                col.const(row, Key.IN_UNITS, x.numel() // x.shape[0])
            else:
                col.add(S.nonzero_count(x), row, Key.IN_NZ)
        # Exact non-finite counts cost a pass and a temporary: only once a
        # non-finite value has been seen (before that, the flag says "1").
        if self.exact_nonfinite:
            col.add(S.nonfinite_count(x), row, Key.IN_NF)

    def _measure_out(self, row: int, module, behaviour: Behaviour, y: torch.Tensor, same_as_prev: bool) -> None:
        col = self._col
        exact = self.exact_nonfinite
        col.const(row, Key.OUT_N, y.numel())
        if not self._sched_stats:
            if behaviour.pointwise and same_as_prev and not exact:
                col.const(row, Key.OUT_INHERIT, 1)  # relu(x) is finite iff x is
            else:
                col.add(S.flag_moment(y), row, Key.OUT_SUM)
        else:
            dead = behaviour.dead and y.dim() >= 2
            vals = S.moments(y, dead=dead)
            if dead:
                col.add(vals.pop(), row, Key.OUT_DEAD)
                col.const(row, Key.OUT_UNITS, y.numel() // y.shape[0])
            for key, t in zip((Key.OUT_MIN, Key.OUT_MAX, Key.OUT_SUM, Key.OUT_NORM, Key.OUT_NZ), vals):
                col.add(t, row, key)
            if behaviour.saturation is not None:
                lo, hi = behaviour.saturation(module)
                col.add(S.saturated(y, lo, hi), row, Key.OUT_SAT)
        if exact:
            col.add(S.nonfinite_count(y), row, Key.OUT_NF)
        if self._sched_hist:
            col.add_run(S.histogram(y), row, Key.HIST)

    def _make_gout_hook(self, row: int):
        """A tensor hook on a module's output: the gradient w.r.t. it, seen
        during the backward of this step only. It measures, never changes
        the gradient (returns None), and holds no reference to the graph.

        Minimal on purpose (it runs once per watched module per backward):
        the sum (the non-finite flag) goes to a list, stacked once at the
        step's end."""
        instrument = weakref.ref(self)
        step = self.step

        def hook(grad):
            inst = instrument()
            if inst is not None and inst.step == step and not inst._removed:
                inst._guard("output gradients", inst._measure_gout, row, grad)
            return None

        return hook

    def _measure_gout(self, row: int, g: torch.Tensor) -> None:
        if g is None or g.is_sparse or not g.is_floating_point():
            return
        n = g.numel()
        if n == 0:
            return
        g = g.detach()
        threads = self._threads
        if threads is not None and threads > 1 and S._GRAIN <= n < S.SMALL and g.device.type == "cpu":
            torch.set_num_threads(1)
            try:
                self._measure_gout_values(row, g)
            finally:
                torch.set_num_threads(threads)
        else:
            self._measure_gout_values(row, g)

    def _measure_gout_values(self, row: int, g: torch.Tensor) -> None:
        acc = torch.float32 if g.dtype in (torch.float16, torch.bfloat16) else None
        self._gout_sums.append(g.sum(dtype=acc))  # no sync: the sum is the flag
        self._gout_rows.append(row)
        if self.exact_nonfinite:
            self._gout_col.add(S.nonfinite_count(g), row, Key.GOUT_NF)

    def _on_loss(self, module, args, kwargs, output):
        if torch.is_grad_enabled() and self._loss is None:
            self._guard("loss", self._measure_loss, module, args, output)
        return None

    def _measure_loss(self, module, args, output) -> None:
        # ln K is the initial loss of a mean-reduced K-class cross-entropy
        # only: a "sum" reduction scales it by the batch size.
        if (
            self.num_classes is None
            and isinstance(module, (nn.CrossEntropyLoss, nn.NLLLoss))
            and getattr(module, "reduction", "mean") == "mean"
        ):
            logits = args[0] if args and isinstance(args[0], torch.Tensor) else None
            if logits is not None and logits.dim() >= 1:
                self.num_classes = int(logits.shape[1] if logits.dim() >= 2 else logits.shape[0])
        t = first_tensor(output)
        if t is None:
            return
        self._loss = t.detach()
        target = first_tensor(args[1]) if len(args) > 1 else None
        if target is not None and self._batches and self._batches[-1][0] == self.step:
            s, a, k = self._batches[-1]
            self._batches[-1] = (s, a, dict(k, target=target))

    # -- backward ---------------------------------------------------------

    def _on_grad_accumulated(self, param) -> None:
        # Runs once per parameter per backward; the first one of a backward
        # queues one callback at its end, where all gradients are complete and
        # not yet clipped by the user.
        if self._backward_queued or "backward" in self._broken or self._removed:
            return
        self._backward_queued = True
        try:
            torch.autograd.Variable._execution_engine.queue_callback(self._on_backward_end)
        except Exception:  # private API gone: measure at the optimizer step instead
            self._backward_queued = False
            self._broken.add("backward")

    def _on_backward_end(self) -> None:
        self._backward_queued = False
        col = self._guard("backward", self._measure_grads)
        if col is not None:
            self._grad_col = col  # with accumulation, the last backward wins

    def _grads_scaled(self) -> bool:
        """True while the gradients still carry the GradScaler's scale."""
        sc = self.scaler
        if sc is None or not getattr(sc, "_enabled", False) or getattr(sc, "_scale", None) is None:
            return False
        if self.optimizer is None:
            return True
        state = sc._per_optimizer_states.get(id(self.optimizer), {})
        stage = state.get("stage")
        return getattr(stage, "name", None) != "UNSCALED"

    def _measure_grads(self) -> _Collector:
        col = _Collector()
        params, rows = self._param_rows()
        grads, grows = [], []
        missing: dict[int, int] = {}
        for p, r in zip(params, rows):
            if p.grad is None:
                missing[r] = missing.get(r, 0) + 1
            else:
                grads.append(p.grad.detach())
                grows.append(r)
        for r in dict.fromkeys(rows):  # rows with a trainable parameter now
            col.const(r, Key.GRAD_MISSING, missing.get(r, 0))
        if not grads:
            return col
        # Divided on the device by the scale (unscaled norms, no sync).
        divisor = self.scaler._scale.detach() if self._grads_scaled() else None
        col.add_many(S.foreach_norm(grads), grows, Key.GRAD_NORM, divisor=divisor)
        if self.exact_nonfinite:
            col.add_many([S.nonfinite_count(g) for g in grads], grows, Key.GRAD_NF)
        return col

    # -- optimizer and commit ----------------------------------------------

    def _on_step_pre(self, optimizer, args, kwargs):
        self._raise_pending()
        self._guard("optimizer", self._before_update)
        return None

    def _before_update(self) -> None:
        if self._grad_col is None:  # no backward seen (hooks off, grads set by hand)
            self._grad_col = self._measure_grads()
        if self.config.is_update(self.step) and self._upd_snapshot is None:
            self._upd_snapshot = self._snapshot_weights()

    def _snapshot_weights(self):
        """(params, rows, copies, norms) before an update."""
        params, rows = self._param_rows()
        with torch.no_grad():
            old = [p.detach().clone() for p in params]
        return params, rows, old, S.foreach_norm(old)

    def _on_step_post(self, optimizer, args, kwargs):
        if self.scaler is None:
            self._guard("optimizer", self._commit)
        return None

    def record(self, step: int | None = None, loss=None) -> None:
        """Record one step by hand (no optimizer watched), after backward.

        With an optimizer watched this only attaches ``loss`` to the step
        that the next ``optimizer.step()`` records.
        """
        self._raise_pending()
        if self.optimizer is not None and step is not None:
            raise ValueError(
                "with an optimizer watched, each optimizer.step() records a step; "
                "record(loss=...) only attaches the loss (pass no step)"
            )
        if loss is not None and isinstance(loss, torch.Tensor):
            self._loss = loss.detach()
        elif loss is not None:
            try:  # a number, a numpy value or array, a list of numbers
                self._loss = torch.as_tensor(np.asarray(loss, dtype=np.float64).reshape(-1))
            except (TypeError, ValueError) as e:  # not a loss: warned, training goes on
                self._guard("loss", _raise, e)
        if self.optimizer is not None:
            return
        if step is not None:
            self.step = int(step)
        self._guard("record", self._commit)

    def _commit(self) -> None:
        step = self.step
        full = self.config.is_stats(step)
        if self._loss_row is None:
            # The first step fixes the pseudo-layers after the modules seen so
            # far; modules first seen later are appended after them.
            self._loss_row = len(self.layers)
            self.layers.append({"name": metadata.PSEUDO_LOSS, "type": "loss"})
            self._opt_row = len(self.layers)
            self.layers.append({"name": metadata.PSEUDO_OPTIMIZER, "type": "optimizer"})
        col = self._col
        if self._grad_col is None and "backward" in self._broken:
            self._grad_col = self._measure_grads()
        if self._grad_col is not None:
            col.extend(self._grad_col)
        if self._gout_sums:
            col.add_many(self._gout_sums, self._gout_rows, Key.GOUT_SUM)
        col.extend(self._gout_col)
        params, prow = self._param_rows()
        if full and params:
            col.add_many(S.foreach_norm([p.detach() for p in params]), prow, Key.WEIGHT_NORM)
        snap = self._upd_snapshot
        if snap is not None:
            sparams, srows, old, base = snap
            with torch.no_grad():
                # In place: the copy becomes w_{t-1} - w_t, no second buffer.
                _foreach_sub_(old, [p.detach() for p in sparams])
            col.add_many(S.foreach_norm(old), srows, Key.UPD_NORM)
            col.add_many(base, srows, Key.UPD_BASE)
        if self.optimizer is None and self.config.is_update(step + 1):
            # Without optimizer hooks the update happens after record():
            # compare the weights of this record with the next one.
            self._next_upd_snapshot = self._snapshot_weights() if params else None
        if self._loss is not None:
            loss = self._loss.float()
            loss = loss if loss.numel() == 1 else loss.mean()
            col.add(loss, self._loss_row, Key.VALUE)
            col.add(loss, self._loss_row, Key.OUT_SUM)  # its non-finite flag
        if self.optimizer is not None and self.optimizer.param_groups:
            lr = self.optimizer.param_groups[0].get("lr")
            if isinstance(lr, torch.Tensor):
                col.add(lr.detach().float(), self._opt_row, Key.VALUE)
            elif lr is not None:
                col.const(self._opt_row, Key.VALUE, float(lr))
        if self.scaler is not None and getattr(self.scaler, "_scale", None) is not None:
            if getattr(self.scaler, "_enabled", True):
                # Concatenated before scaler.update() changes it in place.
                col.add(self.scaler._scale.detach().float(), self._opt_row, Key.SCALE)
        host, rows, keys = col.finish()
        if self._suspect_batch is None and self._batches and self._batches[-1][0] == step:
            # Where the values are already on the host (CPU), the first step
            # with a non-finite value keeps its batch whatever the worker's lag.
            if any(isinstance(h, np.ndarray) and not np.isfinite(h).all() for h in host):
                self._suspect_batch = self._batches[-1]
        packet = StepPacket(step=step, rows=rows, keys=keys, layers=list(self.layers), stats=full, _host=host)
        self._reset_iteration()
        self.step = step + 1
        self.sink(packet)

    # -- for the worker ---------------------------------------------------

    def batch_for(self, step: int):
        """The batch (args, kwargs with the criterion's target) of ``step``,
        or the nearest earlier one still held; None if none is held."""
        best = None
        held = list(self._batches) + ([self._suspect_batch] if self._suspect_batch else [])
        for s, args, kwargs in held:
            if s <= step and (best is None or s > best[0]):
                best = (s, args, kwargs)
        return best
