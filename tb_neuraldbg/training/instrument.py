"""The hooks: on a model (and its optimizer, criterion, scaler), one statistics vector per step.

:class:`Instrument` owns every hook it installs (forward hooks, parameter
post-accumulate-grad hooks, optimizer step hooks, the GradScaler wrapper) and
hands one :class:`~.collector.StepPacket` per training step to a sink (the
queue of the writer's worker thread). Nothing in a hook waits for the device:
statistics are 0-d/1-d tensors collected during the step, concatenated once
at the step's end and copied to the host once (see :mod:`.collector`).

What a step measures is decided here, on the training thread, from the
schedule and from the step's own values, never from how far the worker
lags: on full steps (every ``stats_every``) every module; on cheap steps,
with ``nonfinite="replay"``, no module (a hook only notes that its module
ran) unless the step's check finds a non-finite value, which re-runs the
step with every count on (see :mod:`.replay`); with
``nonfinite="every_step"`` every module's non-finite flag.

Which modules are rows and what is measured for each comes from
:mod:`.modules`; when, from :mod:`.schedule`; the batches behind events are
kept by :mod:`.batches`.

Why one file: one class of about 1,100 lines, on purpose: its hooks share one step's state
(the collector, the schedule, the previous row's output) and run for every
module at every step, so the fast paths are inlined in its methods rather
than spread over more objects (each extra layer is a Python call per hook).
"""

from __future__ import annotations

import collections
import logging
from itertools import repeat
from operator import attrgetter, is_
from time import perf_counter_ns
import warnings
import weakref
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from ..format import metadata
from . import distributed
from . import stats as S
from .batches import BatchKeeper
from .collector import CHUNK, Collector, StepPacket
from . import replay as R
from .collector import all_finite, host_finite
from .gcpause import gc_paused
from .modules import (
    Behaviour,
    behaviour_of,
    first_tensor,
    is_compiled,
    iter_tensors,
    loss_of_output,
    owned_params,
    select_modules,
    unwrap,
)
from .optimizer_facts import StepFacts
from .schedule import WatchConfig
from .stats import Key

__all__ = ["Instrument"]

log = logging.getLogger("tb_neuraldbg")


# What stats.moments() returns, in its order.
_MOMENT_KEYS = (Key.OUT_MIN, Key.OUT_MAX, Key.OUT_SUM, Key.OUT_NORM, Key.OUT_NZ)
_LOSS_KEYS = (Key.VALUE, Key.OUT_SUM)  # the loss row's: its value, and the sum that flags a non-finite one
PERIODS = 256  # steps whose wall-clock periods make the step time of stats_info


_REQUIRES_GRAD = attrgetter("requires_grad")


def _raise(e: BaseException) -> None:
    raise e


def _alone(m: nn.Module, hook_id: int) -> bool:
    """Hook ``hook_id`` is the only hook of ``m`` (forward, pre-forward or
    backward): without it, PyTorch calls ``m`` on its fast path."""
    return (
        list(m._forward_hooks) == [hook_id]
        and not m._forward_pre_hooks
        and not m._backward_hooks
        and not getattr(m, "_backward_pre_hooks", None)
    )


# A module's hooks taken off and put back in place (the handle stays valid
# for remove()): PyTorch's public register/remove cost 8.6 ms for the 1,001
# modules of a 1,000-module model, these dict operations 1.2 ms.


def _detach(m: nn.Module, hook_id: int) -> None:
    kwargs = m._forward_hooks_with_kwargs  # (fails first, before anything changed)
    del m._forward_hooks[hook_id]
    kwargs.pop(hook_id, None)


def _attach(m: nn.Module, hook_id: int, hook) -> None:
    kwargs, hooks = m._forward_hooks_with_kwargs, m._forward_hooks
    hooks[hook_id] = hook
    hooks.move_to_end(hook_id, last=False)  # first, where it was when it was alone
    kwargs[hook_id] = True


def _version_of(t: torch.Tensor) -> int | None:
    """The in-place version counter; None for inference tensors (which
    cannot be modified in place outside inference mode)."""
    try:
        return t._version
    except RuntimeError:
        return None


class _GoutHook:
    """The gradient w.r.t. a module's output, seen during the backward of
    the step it was registered in only. It measures, never changes the
    gradient (returns None), and holds no reference to the graph.

    One small object per module and full step (not a closure, whose cells
    are five more objects for Python's garbage collector to follow until
    the backward); minimal on purpose: the sum (the non-finite flag) goes
    to a list, stacked once at the step's end."""

    __slots__ = ("instrument", "step", "row", "index")

    def __init__(self, instrument: "weakref.ref[Instrument]", step: int, row: int, index: int):
        self.instrument = instrument
        self.step = step
        self.row = row
        self.index = index

    def __call__(self, grad_outputs):
        inst = self.instrument()
        if inst is not None and inst.step == self.step and not inst._removed:
            inst._guard("output gradients", inst._measure_gout, self.row, grad_outputs[self.index])
        return None


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
        # How non-finite values are found: config.nonfinite until a step
        # cannot be replayed ("every_step" from then on).
        self.mode = config.nonfinite
        # Exact non-finite counts in the hooks (every_step: from the step
        # after the first non-finite one; always during a replay).
        self.exact = False
        self.replays = 0  # steps re-run so far
        # What the writer costs in training: the steps recorded, and the
        # nanoseconds spent in the hooks' bodies (every _guard, nested ones
        # counted once; a replay included), read by DebugWriter.stats_info.
        self.steps_recorded = 0
        self.hook_ns = 0
        self._in_guard = False
        # ... and the training loop's own pace: the wall-clock nanoseconds
        # between the last PERIODS recorded steps (their median is the step
        # time stats_info compares the writer's cost with).
        self.periods_ns: collections.deque = collections.deque(maxlen=PERIODS)
        self._last_commit_ns: int | None = None
        # Written by the worker's thread through fail_at_next_hook(); read by the hooks.
        self.pending_failure: BaseException | None = None
        # K of a K-class cross-entropy criterion (the logits' class dim), for
        # the diagnosis' initial-loss check (ln K); None when unknown.
        self.num_classes: int | None = None
        self._handles: list = []
        # [module, forward hook, its handle, detached] of every watched
        # module: on cheap steps the hooks come off (see _sync_module_hooks).
        self._module_hooks: list[list] = []
        # False keeps them on (benchmarks/overhead.py's mode "hooks_kept" measures the difference).
        self.hooks_off_when_cheap = True
        self._hooks_off = False
        # The last step can be followed without the module hooks (the model's
        # own input hook saw its forward and every trainable parameter got a
        # gradient); whether the input hook saw this step's forward.
        self._followable = self._root_input = False
        self._compiled_entry = False
        # Rows that ran, and rows that ran without autograd, at the last
        # step the module hooks were on: a cheap step without them repeats them.
        self._last_ran: np.ndarray | None = None
        self._last_no_grad: frozenset = frozenset()
        self._broken: set[str] = set()
        self._removed = False
        self._ref: weakref.ref | None = None  # to itself, shared by the output-gradient hooks
        self._sched_step: int | None = None  # see _schedule
        self._sched_stats = self._sched_hist = False
        # A cheap step of nonfinite="replay": the module hooks only note
        # that their module ran (see _schedule).
        self._light = False
        self._replaying = False  # inside replay.rerun
        self._replay_nf_only = False  # a full step's replay: counts only
        self._warned_fallback = False
        # Per-parameter hooks find the backward when it does not go through
        # the model's output (a LightningModule whose training_step calls
        # its sub-modules, gradients of an inner tensor's loss): on until a
        # step's backward is seen at the output, again if one is missed
        # (see _check_step).
        self._param_hooks = True
        self._param_handles: list = []
        # every_step on CUDA: the previous step's host copy, checked at the next commit.
        self._unchecked_host: list | None = None
        self._cuda_devices: list[int] = []
        self._device_types: tuple[str, ...] = ("cpu",)

        self.layers: list[dict] = [{"name": metadata.PSEUDO_INPUT, "type": "input"}]
        self._loss_row: int | None = None
        self._opt_row: int | None = None
        # Keyed by the watched module's name: DataParallel calls replicas
        # (new module objects every step) that carry the same hooks.
        self._row_of: dict[str, int] = {}
        self._params_of_row: dict[int, list[nn.Parameter]] = {}
        self._flat_params: tuple | None = None  # see _param_layout
        self._step_params: tuple | None = None  # this step's, see _param_layout
        self._watched = select_modules(model, config.include, config.exclude, config.max_layers)
        # Each watched module's parameters, by id(module), until its row exists.
        self._params_pending: dict[int, list[nn.Parameter]] = {}
        self._params_done: set[int] = set()  # ids of parameters some row owns
        self.batches = BatchKeeper()  # the worker saves the batch behind an event from here
        # Host-side facts for the diagnosis (leftover gradients, modules run
        # without autograd, param groups): see optimizer_facts.py.
        self.facts = StepFacts(optimizer)
        # The model's input was seen with autograd off (an evaluation
        # forward): modules running without autograd then are not a bug.
        self._outside = False
        self._scaler_update: Callable | None = None
        # Without an optimizer, the weights of a record() before the next
        # update (see _commit); taken over by the next iteration.
        self._next_upd_snapshot: tuple | None = None
        # Parameter norms, as a 1-d tensor or a list of 0-d ones; a
        # distributed run swaps in one that reduces over shards (see
        # .distributed).
        self.norms: Callable = S.stacked_norms
        # Gradient norms (swapped the same way).
        self.grad_norms: Callable = S.stacked_norms
        # In a distributed run: gradients are measured after DDP's reducer
        # has written the all-reduced ones (see _on_backward_end).
        self.after_reduce = False
        self._requeued = False
        # For the "stepped by another optimizer" check (see _check_stepped).
        self._probe_version: int | None = None
        self._committed = False
        self.warned_unstepped = False
        self._reset_iteration()
        self._find_devices()

        self._install()

    # -- iteration state --------------------------------------------------

    def _reset_iteration(self) -> None:
        self._step_params = None  # (requires_grad looked at again)
        self._col = Collector()
        # Gradients w.r.t. module outputs, from tensor hooks during backward.
        self._gout_col = Collector()
        self._gout_sums: list[torch.Tensor] = []
        self._gout_rows: list[int] = []
        self._seen_rows: set[int] = set()
        self._input_done = False
        self._root_input = False
        self._threads: int | None = None  # torch.get_num_threads(), read at the step's input
        # The batch requires grad, or was not seen: its own gradient may
        # take a non-finite value that no parameter's gradient shows.
        self._batch_grad = True
        # (weakref to the last measured output, its row, its _version then)
        self._prev_out: tuple[Any, int, int | None] | None = None
        self._grad_col: Collector | None = None
        # Rows with a trainable parameter that got no gradient this step
        # (None until the gradients are measured).
        self._missing_rows: np.ndarray | None = None
        self._loss: torch.Tensor | None = None
        self._backward_queued = False
        self._via_output = False  # this step's backward was seen at the model's output
        # (params, rows, copies, norms) taken before an update; see _commit.
        self._upd_snapshot: tuple | None = self._next_upd_snapshot
        self._next_upd_snapshot = None
        # nonfinite="replay": what the step's first forward left for a
        # re-run; whether the step was checked; the re-run's measurements.
        self._capture: R.StepCapture | None = None
        self._checked = False
        self._replay_col: Collector | None = None
        # (params, their gradient norms before any division), from backward
        # (a stacked tensor, 0-d ones on several devices, or host numbers)
        self._grad_norms: tuple[list, Any] | None = None
        self._schedule()

    def _find_devices(self) -> None:
        """The CUDA devices (whose generators a replay restores) and the
        autocast device types of the model's parameters, once."""
        devs = {p.device for p in self.root.parameters()} | {b.device for b in self.root.buffers()}
        self._cuda_devices = sorted({d.index if d.index is not None else 0 for d in devs if d.type == "cuda"})
        self._device_types = tuple(sorted({"cpu"} | {d.type for d in devs if d.type in ("cuda", "xpu", "hpu")}))

    # -- installation -----------------------------------------------------

    def _install(self) -> None:
        # All or nothing: a watch() that fails half-way (a module refusing a
        # hook) leaves no hook behind, so a retry does not double them.
        try:
            self._install_hooks()
        except BaseException:
            self.remove()
            raise

    def _install_hooks(self) -> None:
        h = self._handles
        # The batch and the model's own loss are read outside a compiled
        # region: on torch.compile's wrapper when that is what was watched.
        entry = self.model if is_compiled(self.model) else self.root
        self._compiled_entry = entry is not self.root
        h.append(entry.register_forward_pre_hook(self._on_model_input, with_kwargs=True))
        # Where the backward starts (one tensor hook a step on the outputs),
        # and the model's own loss when there is no criterion.
        h.append(entry.register_forward_hook(self._on_model_output, with_kwargs=True))
        for name, m in self._watched:
            self._install_module(name, m)
        if entry is self.model and entry is not self.root:
            # Compiled: forward hooks are silent, so the rows exist from the
            # start, in definition order (their parameters are measured).
            for name, m in self._watched:
                self._row_for(name, m)
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

    def _install_module(self, name: str, m: nn.Module) -> None:
        hook = self._make_forward_hook(name, m)
        self._module_hooks.append([m, hook, m.register_forward_hook(hook, with_kwargs=True), False])
        owned = [p for p in owned_params(m) if id(p) not in self._params_done]
        self._params_done.update(id(p) for p in owned)
        self._params_pending[id(m)] = owned

    def add_modules(self, modules: list) -> None:
        """Watch ``[(name, module)]`` added to the model after watch(): their
        rows are appended when they first run."""
        if self._removed:
            return
        for name, m in modules:
            self._watched.append((name, m))
            self._install_module(name, m)
            row = self._row_of.get(name)
            if row is not None:  # a replaced module: its row now owns the new parameters
                self._own_params(row, self._params_pending[id(m)])

    def remove(self) -> None:
        """Remove every hook and the scaler wrapper. Safe to call twice."""
        if self._removed:
            return
        self._removed = True
        for handle in self._handles + self._param_handles:
            handle.remove()
        for entry in self._module_hooks:
            entry[2].remove()  # (a detached one is simply not there)
        self._module_hooks.clear()
        self._handles.clear()
        self._param_handles.clear()
        if self._scaler_update is not None and self.scaler.__dict__.get("update") is self._scaler_update:
            del self.scaler.update
        self._col = Collector()
        self._gout_col = Collector()
        self._gout_sums, self._gout_rows = [], []
        self._grad_col = None
        self._upd_snapshot = self._next_upd_snapshot = None
        self._capture = None
        self._replay_col = None
        self._grad_norms = None

    def release(self) -> None:
        """Drop the references to recent batches (after the worker is done
        with the steps that might need them) and, once the hooks are off, to
        the model, its parameters, the optimizer, criterion and scaler: a
        handle or writer kept after close() must not keep them alive."""
        self.batches.clear()
        if self._removed:
            self.model = self.root = None
            self.optimizer = self.criterion = self.scaler = None
            self.facts.release()
            self._watched = []
            self._params_of_row = {}
            self._params_pending = {}
            self._prev_out = None
            self._loss = None

    @property
    def removed(self) -> bool:
        """True once :meth:`remove` ran: the hooks are off."""
        return self._removed

    # -- from the worker's thread -----------------------------------------
    # A plain attribute store (atomic under the GIL) that the hooks read at
    # their next call: the worker never waits for the training thread, and
    # never changes what is measured.

    def fail_at_next_hook(self, failure: BaseException) -> None:
        """Raise ``failure`` in the training thread at the next model input,
        optimizer step or record (``on_error="raise"``)."""
        self.pending_failure = failure

    # -- failure handling -------------------------------------------------

    def _guard(self, part: str, fn, *args):
        """Run a hook body; a failure is warned once and switches the part off.

        Monitoring must never break training: the user's loop continues with
        less data. The TrainingFailure of on_error="raise" is raised outside.
        """
        if part in self._broken or self._removed:
            return None
        outer = not self._in_guard  # (the clock read twice a hook, not at every nested part)
        if outer:
            self._in_guard = True
            t0 = perf_counter_ns()
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 -- anything, by design
            self._broken.add(part)
            msg = f"{distributed.tag()}: monitoring of the {part} failed and is switched off: {type(e).__name__}: {e}"
            warnings.warn(msg, RuntimeWarning, stacklevel=2)
            log.warning(msg)
            return None
        finally:
            if outer:
                self._in_guard = False
                self.hook_ns += perf_counter_ns() - t0

    def _raise_pending(self) -> None:
        failure = self.pending_failure
        if failure is not None:
            self.pending_failure = None
            raise failure

    # -- rows -------------------------------------------------------------

    def _own_params(self, row: int, owned: list) -> None:
        """``row`` owns ``owned`` from now on (hooked, while per-parameter
        hooks are on)."""
        self._params_of_row[row] = owned
        self._flat_params = self._step_params = None
        if self._param_hooks:
            for p in owned:
                if p.requires_grad:  # (a frozen one refuses the hook)
                    self._param_handles.append(p.register_post_accumulate_grad_hook(self._on_grad_accumulated))

    def _row_for(self, name: str, m: nn.Module) -> int:
        row = self._row_of.get(name)
        if row is None:
            row = len(self.layers)
            self.layers.append({"name": name, "type": type(m).__name__})
            self._row_of[name] = row
            self._own_params(row, self._params_pending.get(id(m), []))
        return row

    def _param_rows(self) -> tuple[list[nn.Parameter], list[int]]:
        """The watched parameters that require grad *now* (a parameter
        frozen after watch() is left out: no gradient is expected of it),
        and their rows; looked at once a step (see :meth:`_param_layout`)."""
        layout = self._param_layout()
        return layout[0], layout[1]

    def _param_layout(self) -> tuple[list, list, np.ndarray, np.ndarray]:
        """(params, rows, rows as an array, the distinct rows): of
        :meth:`_param_rows`, computed once a step and when a row is added
        (a model of 1,000 modules has thousands of parameters: each pass
        over them in Python costs milliseconds)."""
        layout = self._step_params
        if layout is not None:
            return layout
        flat = self._flat_params
        if flat is None:
            params = [p for ps in self._params_of_row.values() for p in ps]
            rows = [r for r, ps in self._params_of_row.items() for _ in ps]
            arr = np.asarray(rows, dtype=np.int64)
            flat = self._flat_params = (params, rows, arr, np.unique(arr))
        params = flat[0]
        if all(map(_REQUIRES_GRAD, params)):
            layout = flat
        else:
            keep = [i for i, p in enumerate(params) if p.requires_grad]
            rows = [flat[1][i] for i in keep]
            arr = np.asarray(rows, dtype=np.int64)
            layout = ([params[i] for i in keep], rows, arr, np.unique(arr))
        self._step_params = layout
        return layout

    # -- forward ----------------------------------------------------------

    # Every module hook starts with torch.compiler.is_compiling(): dynamo
    # traces hooks into the graph, and ours (weak references, Python state,
    # thread settings) would break it. Constant at trace time, so the hook
    # adds nothing to a compiled graph: inside one, only what runs outside
    # (parameters, gradients, the batch and loss at the wrapper) is measured.

    def _on_model_input(self, module, args, kwargs):
        if torch.compiler.is_compiling():
            return None
        if self._replaying:
            if not self._input_done:
                self._input_done = True
                self._guard("replay", self._measure_input_replay, args, kwargs)
            return None
        self._raise_pending()
        # The model's input seen with autograd off is an evaluation forward:
        # modules running without autograd then are not a bug.
        self._outside = not torch.is_grad_enabled()
        if self._outside or self._removed:
            return None
        self._root_input = True
        if self.mode == "replay" and self._capture is None:
            # Before the forward: the RNG and autocast state it starts from.
            self._capture = self._guard("replay", R.capture, args, kwargs, self._cuda_devices, self._device_types)
        self.observe_input(args, kwargs)
        return None

    def observe_input(self, args, kwargs) -> None:
        """Measure this step's batch (the ``<input>`` row, the kept batch),
        once a step. The model's input hook calls it; a framework's callback
        does too, with the batch it hands the user's step (a LightningModule's
        training_step may never call the model itself)."""
        if self._input_done or self._removed or not torch.is_grad_enabled():
            return
        self._input_done = True
        self._threads = torch.get_num_threads()  # once a step, for one_thread
        if self._sched_step != self.step:
            self._schedule()
        self._guard("input", self._measure_input, args, kwargs)

    def _on_model_output(self, module, args, kwargs, output):
        if torch.compiler.is_compiling() or self._replaying or self._removed or not torch.is_grad_enabled():
            return None
        if self.criterion is None and self._loss is None:
            # A model that computes its own loss (Hugging Face: output.loss).
            loss = loss_of_output(output)
            if loss is not None:
                self._loss = loss.detach()
        self._guard("backward", self._follow_outputs, output)
        return None

    def _follow_outputs(self, output) -> None:
        """A hook on each output tensor: where the backward starts, it queues
        the measurement of the gradients at the backward's end (one hook a
        step, not one per parameter); on the step's first call it also keeps
        the gradient for a replay, unless the criterion can give it again."""
        cap = self._capture
        if cap is not None and cap.outputs is not None:
            cap = None  # kept from the first call of the step only
        outs = list(iter_tensors(output))[: R.MAX_OUTPUTS]
        if cap is not None:
            cap.outputs = [weakref.ref(t) for t in outs]
        for i, t in enumerate(outs):
            if t.requires_grad and not t.is_leaf:
                t.register_hook(self._make_output_hook(i, cap))

    def _make_output_hook(self, index: int, cap: R.StepCapture | None):
        instrument = weakref.ref(self)
        step = self.step
        keep = cap.keep_grad(index) if cap is not None else None

        def hook(grad):
            inst = instrument()
            if inst is not None and inst.step == step:
                inst._via_output = True
                inst._on_backward_start()
                if keep is not None:
                    keep(grad)
            return None

        return hook

    def _measure_input(self, args, kwargs) -> None:
        if self.config.save_batches:
            self.batches.keep(self.step, args, kwargs)
        self._batch_grad = any(map(_REQUIRES_GRAD, iter_tensors((args, kwargs))))
        x = self._batch_tensor(args, kwargs)
        if x is None:
            return
        if x.is_floating_point():
            # The first module usually gets this very tensor: it then reuses
            # these statistics instead of reading the batch again.
            self._prev_out = (weakref.ref(x), 0, _version_of(x))
        if x.requires_grad:  # (a batch seldom does: the detached alias costs a few microseconds)
            x = x.detach()
        with S.one_thread(x, threads=self._threads):
            self._measure_batch(x)

    @staticmethod
    def _batch_tensor(args, kwargs) -> torch.Tensor | None:
        x = first_tensor(args) if args else None
        if x is None:
            x = first_tensor(kwargs)
        if x is None or x.is_complex() or x.numel() == 0:
            return None
        return x

    def _measure_input_replay(self, args, kwargs) -> None:
        x = self._batch_tensor(args, kwargs)
        if x is None:
            return
        if x.is_floating_point():
            self._prev_out = (weakref.ref(x), 0, _version_of(x))
        self._col.add(S.nonfinite_count(x.detach()), 0, Key.OUT_NF)

    def _measure_batch(self, x: torch.Tensor) -> None:
        col = self._col
        # Every step: min/max/sum/norm (a bad batch is found at its step);
        # the zero count on full-statistics steps.
        xf = S.float_view(x)
        acc = S.acc_dtype(xf)
        mn, mx = torch.aminmax(xf)
        col.add(mn, 0, Key.OUT_MIN)
        col.add(mx, 0, Key.OUT_MAX)
        col.add(xf.sum(dtype=acc), 0, Key.OUT_SUM)
        col.add(torch.linalg.vector_norm(xf, dtype=acc), 0, Key.OUT_NORM)
        if self._sched_stats:
            col.add(S.nonzero_count(xf), 0, Key.OUT_NZ)
        if self.exact:
            col.add(S.nonfinite_count(x), 0, Key.OUT_NF)
        col.const(0, Key.OUT_N, x.numel())
        if x.dim() >= 1:
            col.const(0, Key.VALUE, x.shape[0])  # the batch size, for the diagnosis (dead units need samples)

    def _make_forward_hook(self, name: str, m: nn.Module):
        behaviour = behaviour_of(m)
        instrument = weakref.ref(self)
        row_of = self._row_of

        def hook(module, args, kwargs, output):
            if torch.compiler.is_compiling():
                return None
            inst = instrument()
            if inst is None:
                return None
            if not torch.is_grad_enabled():
                if inst._input_done and not inst._outside:  # no_grad() inside the training forward
                    inst._guard("optimizer facts", inst.facts.ran_without_grad, inst._row_for(name, m))
                return None
            if inst._light:
                # A cheap step of nonfinite="replay": only note that it ran.
                row = row_of.get(name)
                if row is not None:
                    inst._seen_rows.add(row)
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
        if self._light:
            return  # first seen at a cheap step: a row now, measured from the next full step
        x = first_tensor(args) if args else None
        if x is None and kwargs:
            x = first_tensor(kwargs)
        if x is not None and not (x.is_floating_point() and x.numel() > 0):
            x = None
        y = first_tensor(output)
        if y is not None and not (y.is_floating_point() and y.numel() > 0):
            y = None
        same_as_prev = False
        nf_only = self._replay_nf_only
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
                if not nf_only:  # a full step's replay: the step has it already
                    self._col.const(row, Key.IN_REF, prev[1])  # same tensor: reuse its statistics
                x = None
        if y is not None:
            self._prev_out = (weakref.ref(y), row, _version_of(y))
        if self._sched_step != self.step:
            self._schedule()
        self._measure_values(row, module, behaviour, x, y, same_as_prev, nf_only)
        if y is not None and y.requires_grad and not y.is_leaf:
            if self.mode == "replay" and not (self._replaying or self._batch_grad):
                # With a batch that does not require grad, a non-finite
                # output gradient reaches a parameter's gradient (in the
                # step's norms: then the step is replayed, with every output
                # gradient read). So a full step reads none (a third of such
                # a step of the 1,000-module model: a read and a call from
                # autograd per module) and its flag is 0 where the step's
                # evidence is clean (slots.assemble).
                self._col.const(row, Key.GOUT_CLEAN, 1)
                return
            # A leaf (a parameter returned as is) would keep the hook beyond
            # the step; a non-leaf's hook dies with its graph. On the node
            # that made ``y``, not on ``y`` (Tensor.register_hook costs 40 us
            # in place, a node's pre-hook 3 us): the same gradient, the one
            # a tensor hook registered now would get (an in-place op on ``y``
            # later makes a new node; this one still gets the gradient w.r.t.
            # the value measured here).
            y.grad_fn.register_prehook(self._make_gout_hook(row, y.output_nr))

    def _measure_values(self, row, module, behaviour: Behaviour, x, y, same_as_prev: bool, nf_only: bool) -> None:
        """A module's first input ``x`` and output ``y`` (either may be None)
        through torch's ops."""
        # One intra-op thread for small CPU tensors (stats.one_thread_pays),
        # switched inline: this runs for every module at every step.
        threads = self._threads
        switch = (
            threads is not None
            and threads > 1
            # Not when the output is not measured (see _measure_out): no reduction.
            and not (
                x is None
                and same_as_prev
                and behaviour.pointwise
                and not (self._sched_stats or self._sched_hist or self.exact)
            )
            and S.one_thread_pays(x, y)
        )
        if switch:
            torch.set_num_threads(1)
        try:
            if nf_only:
                if x is not None:
                    self._col.add(S.nonfinite_count(x.detach()), row, Key.IN_NF)
                if y is not None:
                    self._col.add(S.nonfinite_count(y.detach()), row, Key.OUT_NF)
            else:
                if x is not None:
                    self._measure_in(row, x)
                if y is not None:
                    self._measure_out(row, module, behaviour, y, same_as_prev)
        finally:
            if switch:
                torch.set_num_threads(threads)

    def _schedule(self) -> None:
        """This step's schedule, computed once per step (not per hook): at
        the end of the previous step, again if ``record(step)`` moved it."""
        step = self.step
        self._sched_step = step
        self._sched_stats = self.config.is_stats(step)
        self._sched_hist = self.config.is_hist(step)
        self._light = self.mode == "replay" and not self._sched_stats and not self._replaying
        self._sync_module_hooks()

    def _sync_module_hooks(self) -> None:
        """Module forward hooks off for a cheap step, on for any other.

        A cheap step's hooks would only note that their module ran, and a
        module with any hook takes PyTorch's slow call path (about 5 us a
        call: 5 ms a step for a 1,000-module model, as much as all the rest
        of a cheap step; more on a GPU, where the step waits for the Python
        that launches it). So the hooks come off while the model's own input
        hook follows the steps and every trainable parameter gets a gradient
        (not for a compiled model, whose hooks are traced, nor when the step
        does not go through the model's forward, nor with conditional
        computation, whose skipped modules only the hooks can tell),
        for modules that have no other hook (with another one the slow path
        stays, and putting ours back first keeps the hooks' order only
        because ours was alone). The rows that ran are those of the last step
        with the hooks on."""
        off = (
            self.hooks_off_when_cheap and self._light and self._followable
            and not self._compiled_entry and not self._removed
        )
        if off == self._hooks_off:
            return
        self._hooks_off = off
        try:
            for entry in self._module_hooks:
                m, hook, handle, detached = entry
                if off:
                    if not detached and _alone(m, handle.id):
                        _detach(m, handle.id)
                        entry[3] = True
                elif detached:
                    _attach(m, handle.id, hook)
                    entry[3] = False
        except Exception as e:  # noqa: BLE001 -- PyTorch's hook dicts changed: hooks on from now on
            self.hooks_off_when_cheap = self._hooks_off = False
            for entry in self._module_hooks:
                if entry[3]:
                    entry[3] = False
                    entry[2] = entry[0].register_forward_hook(entry[1], with_kwargs=True, prepend=True)
            self._guard("cheap steps without module hooks", _raise, e)  # (warned once)

    def _measure_in(self, row: int, x: torch.Tensor) -> None:
        """A module's first input (not the previous row's output); ``x``
        may require grad (detached here before torch's ops)."""
        col = self._col
        # Every step the sum (the non-finite flag), the counts on
        # full-statistics steps.
        x = x.detach()
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
        # Exact non-finite counts cost a pass and a temporary: in a replay,
        # and with nonfinite="every_step" once a non-finite value was seen
        # (before that, the flag says "1").
        if self.exact:
            col.add(S.nonfinite_count(x), row, Key.IN_NF)

    def _measure_out(self, row: int, module, behaviour: Behaviour, y: torch.Tensor, same_as_prev: bool) -> None:
        """A module's output; ``y`` may require grad: detached here before
        torch's ops."""
        col = self._col
        exact = self.exact
        y = y.detach()
        col.const(row, Key.OUT_N, y.numel())
        # One value (a 0-d output, a [1, 1] score) has no spread: only its
        # non-finite flag and value, never a "constant activation".
        if not self._sched_stats or y.numel() == 1:
            if behaviour.pointwise and same_as_prev and not exact:
                col.const(row, Key.OUT_INHERIT, 1)  # relu(x) is finite iff x is
            else:
                col.add(S.flag_moment(y), row, Key.OUT_SUM)
        else:
            dead = behaviour.dead and y.dim() >= 2
            ends = None if behaviour.saturation is None else behaviour.saturation(module)
            vals = S.moments(y, dead=dead)
            if dead:
                col.add(vals.pop(), row, Key.OUT_DEAD)
                col.const(row, Key.OUT_UNITS, y.numel() // y.shape[0])
            col.add_row(row, _MOMENT_KEYS, vals)
            if ends is not None:
                col.add(S.saturated(y, *ends), row, Key.OUT_SAT)
        if exact:
            col.add(S.nonfinite_count(y), row, Key.OUT_NF)
        if self._sched_hist:
            self._add_histogram(row, y)

    def _add_histogram(self, row: int, y: torch.Tensor) -> None:
        """A histogram step's bins of a module's output ``y``, on one thread
        where :func:`stats.one_thread_pays` says so."""
        # (torch's current setting asked, not the step's: 1 where the
        # caller has switched already, and then no switch here)
        with S.one_thread(y):
            run = S.histogram(y)  # (detached there)
        self._col.add_run(run, row, Key.HIST)

    def _make_gout_hook(self, row: int, index: int) -> "_GoutHook":
        """A pre-hook for the autograd node that made a module's output (its
        output ``index``): see :class:`_GoutHook`."""
        ref = self._ref
        if ref is None:
            ref = self._ref = weakref.ref(self)
        return _GoutHook(ref, self.step, row, index)

    def _measure_gout(self, row: int, g: torch.Tensor) -> None:
        if g is None or g.is_sparse or not g.is_floating_point():
            return
        if g.numel() == 0:
            return
        g = g.detach()
        threads = self._threads
        if threads is not None and threads > 1 and S.one_thread_pays(g):
            torch.set_num_threads(1)
            try:
                self._measure_gout_values(row, g)
            finally:
                torch.set_num_threads(threads)
        else:
            self._measure_gout_values(row, g)

    def _measure_gout_values(self, row: int, g: torch.Tensor) -> None:
        if not self._replay_nf_only:
            sums = self._gout_sums
            sums.append(g.sum(dtype=S.ACC_DTYPE.get(g.dtype)))  # no sync: the sum is the flag
            self._gout_rows.append(row)
            if len(sums) >= CHUNK:  # stacked before they grow old (see collector.CHUNK)
                self._col.add_many(sums, self._gout_rows, Key.GOUT_SUM)
                self._gout_sums, self._gout_rows = [], []
        if self.exact:
            self._gout_col.add(S.nonfinite_count(g), row, Key.GOUT_NF)

    def _on_loss(self, module, args, kwargs, output):
        if torch.compiler.is_compiling() or self._replaying or not torch.is_grad_enabled():
            return None
        if not (self._input_done or self._seen_rows):
            # Nothing of the watched model ran in this step yet (neither its
            # forward nor a watched module called directly): the criterion
            # scores another model (one loss module shared with a baseline),
            # whose backward must not be read as this model's.
            return None
        cap = self._capture
        if cap is not None:
            self._guard("replay", cap.note_criterion, args, kwargs, R.autocast_state(self._device_types))
        if self._loss is None:
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
        if t.requires_grad:
            # Backward reaches the loss before any parameter's gradient: the
            # moment to look for gradients left over from the previous step.
            instrument = weakref.ref(self)

            def hook(grad):
                inst = instrument()
                if inst is not None:
                    inst._check_leftovers()

            t.register_hook(hook)
        target = first_tensor(args[1]) if len(args) > 1 else None
        if target is not None:
            self.batches.attach_target(self.step, target)

    # -- backward ---------------------------------------------------------

    @gc_paused
    def _check_leftovers(self, fresh=None) -> None:
        if self.facts.unchecked and not self._removed:
            self._guard("optimizer facts", self.facts.before_backward, self._col, *self._param_rows(), fresh)

    def _on_grad_accumulated(self, param) -> None:
        # Per parameter, installed only when a step's gradients came from a
        # backward that did not go through the model's output (see _check_step).
        self._on_backward_start(param)

    def _on_backward_start(self, fresh=None) -> None:
        # The first call of a backward queues one callback at its end, where
        # all gradients are complete and not yet clipped by the user.
        # ``fresh``: the parameter whose gradient was just accumulated (the
        # per-parameter hook that found the backward).
        if self._backward_queued or self._replaying or "backward" in self._broken or self._removed:
            return
        self._backward_queued = True
        self._check_leftovers(fresh)  # (without a hooked loss: here, where the backward starts)
        try:
            torch.autograd.Variable._execution_engine.queue_callback(self._on_backward_end)
        except Exception:  # private API gone: measure at the optimizer step instead
            self._backward_queued = False
            self._broken.add("backward")

    def _on_backward_end(self) -> None:
        if self.after_reduce and not self._requeued:
            # DDP queues its end-of-backward callback (which waits for the
            # all-reduce and writes the averaged gradients) after ours: run
            # again behind it, to measure what the optimizer will apply.
            try:
                torch.autograd.Variable._execution_engine.queue_callback(self._on_backward_end)
                self._requeued = True
                return
            except Exception:  # noqa: BLE001 -- measure now rather than never
                pass
        self._requeued = False
        self._backward_queued = False
        if self.optimizer is not None and not self.warned_unstepped:
            self._guard("optimizer check", self._check_stepped)
        col = self._guard("backward", self._measure_grads)
        if col is not None:
            self._grad_col = col  # with accumulation, the last backward wins

    def _check_stepped(self) -> None:
        """Warn once when the weights changed between two backwards without
        the watched optimizer stepping (another optimizer steps the model,
        and nothing is recorded). A parameter's in-place version counter
        tells, without reading the weights."""
        probe = next((p for ps in self._params_of_row.values() for p in ps if p.requires_grad), None)
        version = _version_of(probe) if probe is not None else None
        if version is None:
            return
        if self._probe_version is not None and not self._committed and version != self._probe_version:
            self.warned_unstepped = True
            msg = (
                f"{distributed.tag()}: the model's weights changed but the watched optimizer "
                f"({type(self.optimizer).__name__}) did not step: is the model stepped by "
                "another optimizer? No step is recorded until the watched one steps"
            )
            warnings.warn(msg, RuntimeWarning, stacklevel=2)
            log.warning(msg)
        self._probe_version = version
        self._committed = False

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

    @gc_paused
    def _measure_grads(self) -> Collector:
        col = Collector()
        params, rows, row_arr, present = self._param_layout()  # present: rows with a trainable parameter now
        self._grad_norms = None
        if not params:
            return col
        # Once per step for every parameter: list work, no per-row Python.
        grads = [p.grad for p in params]
        if any(map(is_, grads, repeat(None))):  # (not "None in grads": that calls Tensor.__eq__ on each)
            none = np.fromiter((g is None for g in grads), dtype=bool, count=len(grads))
        else:
            none = None
        if none is not None:
            missing = np.bincount(row_arr, weights=none, minlength=int(present[-1]) + 1)[present]
        else:
            missing = np.zeros(len(present))
        col.const_many(present, Key.GRAD_MISSING, missing)
        self._missing_rows = present[missing > 0] if none is not None else present[:0]
        if none is not None:
            keep = np.flatnonzero(~none)
            idx = keep.tolist()
            gparams, grows = [params[i] for i in idx], [rows[i] for i in idx]
            grads = [grads[i] for i in idx]
        else:
            gparams, grows = params, row_arr
        if not gparams:
            return col
        divisor = self.scaler._scale.detach() if self._grads_scaled() else None
        # A gradient that requires grad (create_graph=True) is measured detached.
        if any(map(_REQUIRES_GRAD, grads)):
            grads = [g.detach() if g.requires_grad else g for g in grads]
        # (divisor: divided on the device by the scale: unscaled norms, no sync)
        if divisor is not None and self.grad_norms is S.stacked_norms:
            norms, divisor = S.unscaled_norms(grads, divisor), None
        else:
            norms = self.grad_norms(grads)
        try:
            # One tensor kept (not thousands of 0-d ones, which would outlive
            # the step and wake Python's full garbage collection).
            if isinstance(norms, torch.Tensor):
                stacked = norms
            else:
                stacked = torch.stack(norms) if len(norms) > 1 else norms[0].reshape(1)
        except RuntimeError:  # on several devices (a model split across GPUs)
            col.add_many(norms, grows, Key.GRAD_NORM, divisor=divisor)
        else:
            norms = stacked
            col.add_stacked(norms, grows, Key.GRAD_NORM, divisor=divisor)
        self._grad_norms = (gparams, norms)
        if self.exact:
            col.add_many([S.nonfinite_count(g) for g in grads], grows, Key.GRAD_NF)
        return col

    # -- the step's check and its replay -------------------------------------

    def _check_step(self, at_commit: bool) -> None:
        """Once a step, before its gradients are used (at the optimizer's
        step pre-hook, else at the commit): with nonfinite="replay", re-run
        the step when what it computed anyway has a non-finite value."""
        if self._checked:
            return
        self._checked = True
        if self._grad_col is None:
            # No backward seen through the model's output (grads set by hand,
            # a loss from an inner tensor): measured now, and from now on the
            # backward is followed through every parameter.
            self._grad_col = self._measure_grads()
            if self._grad_norms is not None and not self._param_hooks:
                self._param_hooks = True
                for p in self._param_rows()[0]:
                    self._param_handles.append(p.register_post_accumulate_grad_hook(self._on_grad_accumulated))
        elif self._via_output and self._param_hooks:
            # The model's output leads to the backward: one tensor hook a
            # step does, the per-parameter ones go.
            self._param_hooks = False
            for handle in self._param_handles:
                handle.remove()
            self._param_handles.clear()
        if self.mode != "replay":
            return
        cap, self._capture = self._capture, None
        if self._scaler_decides():
            # An enabled GradScaler on CUDA has read its found-inf flag:
            # the optimizer's pre-hook runs only for a step without inf/NaN
            # gradients. No second synchronisation for ours.
            dirty = at_commit and self._grad_col is not None
        else:
            if self._gout_sums:  # (joined to the step's values now: stacked once)
                self._col.add_many(self._gout_sums, self._gout_rows, Key.GOUT_SUM)
                self._gout_sums, self._gout_rows = [], []
            parts = [c for c in (self._col, self._grad_col) if c is not None]
            for c in parts:
                c.compact()  # stacked once, for this check and the commit
            extra = [self._loss] if self._loss is not None else []
            dirty = not all_finite(parts, extra)
            if dirty:  # (on CUDA the one place that knows it before the worker: keep its batch)
                self.batches.note_nonfinite(self.step)
        if dirty:
            self._replay(cap)

    def _scaler_decides(self) -> bool:
        sc = self.scaler
        scale = getattr(sc, "_scale", None) if sc is not None else None
        return (
            self.optimizer is not None
            and scale is not None
            and getattr(sc, "_enabled", False)
            and scale.device.type == "cuda"
        )

    def _replay(self, cap: R.StepCapture | None) -> None:
        """Re-run the step with every count on; its measurements join the
        step's row. Falls back to the every-step flags when it cannot."""
        if cap is None:
            self._fall_back("no batch was kept (no forward of the watched model under grad this step)")
            return
        col = Collector()
        saved = (
            self._col, self._gout_col, self._gout_sums, self._gout_rows, self._seen_rows, self._input_done,
            self._prev_out, self._light, self.exact, self._sched_stats, self._sched_hist,
        )
        stats = self._sched_stats
        self._col, self._gout_col, self._gout_sums, self._gout_rows = col, Collector(), [], []
        self._seen_rows, self._input_done, self._prev_out = set(), False, None
        self._light, self.exact, self._sched_stats, self._sched_hist = False, True, False, False
        self._replaying, self._replay_nf_only = True, stats
        self._sync_module_hooks()  # (on for the re-run)
        params = [p for p in self.root.parameters() if p.requires_grad]
        scale = self.scaler._scale.detach() if self._grads_scaled() else None
        try:
            loss, grads = R.rerun(self.root, self.criterion, cap, params, scale, self._cuda_devices)
            if self._gout_sums:
                col.add_many(self._gout_sums, self._gout_rows, Key.GOUT_SUM)
            col.extend(self._gout_col)
            problem = self._reproduced(cap, loss, params, grads, col, scale)
        except Exception as e:  # noqa: BLE001 -- a model that cannot re-run: flags instead
            problem = f"{type(e).__name__}: {e}"
        finally:
            (
                self._col, self._gout_col, self._gout_sums, self._gout_rows, self._seen_rows, self._input_done,
                self._prev_out, self._light, self.exact, self._sched_stats, self._sched_hist,
            ) = saved
            self._replaying = self._replay_nf_only = False
            self._sync_module_hooks()
        self.replays += 1
        if problem:
            self._fall_back(problem)
        else:
            self._replay_col = col

    def _reproduced(self, cap, loss, params, grads, col: Collector, scale: torch.Tensor | None) -> str | None:
        """None when the re-run gave the same parameters non-finite
        gradients as the step (and the same loss, finite or not); else why
        not. Adds the exact counts of the re-run's gradients to ``col``.
        ``scale``: the GradScaler's, which the re-run's gradients carry."""
        if self._loss is not None and loss is not None:
            if bool(torch.isfinite(self._loss.float()).all()) != bool(torch.isfinite(loss.float()).all()):
                return "the replay's loss differs from the step's"
        if self._grad_norms is None:
            return None
        if not grads:
            return "no gradient of the model's output was kept (a loss computed from more than the model's output?)"
        gparams, norms = self._grad_norms
        replayed = {id(p): g for p, g in zip(params, grads)}
        again = [replayed.get(id(p)) for p in gparams]
        if any(g is None for g in again):
            return "the replay's backward reached other parameters"
        if isinstance(norms, torch.Tensor):
            was = torch.isfinite(norms.float())
        else:
            was = torch.isfinite(torch.stack([n.float().cpu() for n in norms]))
        again = [g.detach() for g in again]  # (norms as the step took them: the same rounding)
        now = S.stacked_norms(again) if scale is None else S.unscaled_norms(again, scale)
        now = torch.isfinite(now.float() if isinstance(now, torch.Tensor) else torch.stack([n.float() for n in now]))
        if not torch.equal(was.cpu(), now.cpu()):
            return "the replay's gradients differ from the step's (another RNG, a nondeterministic op?)"
        rows = dict(zip(map(id, self._param_rows()[0]), self._param_rows()[1]))
        col.add_many([S.nonfinite_count(g) for g in again], [rows[id(p)] for p in gparams], Key.GRAD_NF)
        return None

    def _fall_back(self, why: str) -> None:
        """From the next step on, every module's non-finite flags at every
        step, exact counts (a non-finite value was just seen); warned once."""
        self.mode = "every_step"
        self.exact = True
        if not self._warned_fallback:
            self._warned_fallback = True
            msg = (
                f"tb_neuraldbg: step {self.step} has non-finite values but cannot be replayed to find "
                f"where they come from ({why}); measuring every module's non-finite values at every "
                f"step from now on"
            )
            warnings.warn(msg, RuntimeWarning, stacklevel=4)
            log.warning(msg)

    # -- optimizer and commit ----------------------------------------------

    def _on_step_pre(self, optimizer, args, kwargs):
        self._raise_pending()
        self._guard("optimizer", self._before_update)
        return None

    @gc_paused
    def _before_update(self) -> None:
        self._check_step(at_commit=False)
        if self.config.is_update(self.step) and self._upd_snapshot is None:
            self._upd_snapshot = self._snapshot_weights()

    def _snapshot_weights(self):
        """(params, rows, copies, norms) before an update."""
        params, rows = self._param_rows()
        with torch.no_grad():
            old = [p.detach().clone() for p in params]
        return params, rows, old, self.norms(old)

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

    @gc_paused
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
        self._guard("replay", self._check_step, True)
        light = self._light and self._replay_col is None
        if self._replay_col is not None:
            col.extend(self._replay_col)
        if self._grad_col is not None:
            col.extend(self._grad_col)
        if self._gout_sums:
            col.add_many(self._gout_sums, self._gout_rows, Key.GOUT_SUM)
        col.extend(self._gout_col)
        params, prow = self._param_rows()
        if self._hooks_off:
            for r in self._last_no_grad:  # (no hook saw them: as at the last step that could)
                self.facts.ran_without_grad(r)
        else:
            self._last_no_grad = self.facts.no_grad_rows
        self._guard("optimizer facts", self.facts.commit, col, params, prow)
        if full and params:
            with torch.no_grad():  # (no detached copies: 1,500 of them cost a millisecond)
                col.add_many(self.norms(params), prow, Key.WEIGHT_NORM)
        snap = self._upd_snapshot
        if snap is not None:
            sparams, srows, old, base = snap
            with torch.no_grad():
                # In place: the copy becomes w_{t-1} - w_t, no second buffer.
                S.foreach_sub_(old, [p.detach() for p in sparams])
            col.add_many(self.norms(old), srows, Key.UPD_NORM)
            col.add_many(base, srows, Key.UPD_BASE)
        if self.optimizer is None and self.config.is_update(step + 1):
            # Without optimizer hooks the update happens after record():
            # compare the weights of this record with the next one.
            self._next_upd_snapshot = self._snapshot_weights() if self._param_rows()[0] else None
        if self._loss is not None:
            loss = self._loss.float()
            loss = loss if loss.numel() == 1 else loss.mean()
            if type(loss) is torch.Tensor and loss.is_cpu:
                # Read now (no device to wait for): on a cheap step it is the
                # step's one device value, and its stack at the step's end
                # cost more than this read.
                value = loss.item()
                col.measured(self._loss_row, _LOSS_KEYS, (value, value))
            else:
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
        self.batches.note_step(step, host)
        if self.mode == "every_step" and not self.exact:
            self._note_nonfinite(host)
        missing = self._missing_rows
        if not self._hooks_off:
            self._last_ran = np.fromiter(self._seen_rows, dtype=np.int64, count=len(self._seen_rows))
            ran = self._last_ran if light else None
        elif not light:
            ran = None  # (replayed: measured)
        else:
            ran = self._last_ran
            if missing is None or len(missing):
                # A module that got no gradient may not have run (an unrouted
                # expert): not said to have, and the hooks back from the next step.
                ran = np.setdiff1d(ran, missing) if missing is not None else ran[:0]
        # Without the hooks, a module that runs without giving its parameters a
        # gradient (conditional computation, a bug) could not be told apart.
        self._followable = self._root_input and missing is not None and not len(missing)
        packet = StepPacket(
            step=step, rows=rows, keys=keys, layers=list(self.layers), stats=full, host=host, ran=ran
        )
        self.step = step + 1
        self.steps_recorded += 1
        now = perf_counter_ns()
        if self._last_commit_ns is not None:
            self.periods_ns.append(now - self._last_commit_ns)
        self._last_commit_ns = now
        self._reset_iteration()  # (schedules the next step: after the step moved)
        self._committed = True
        self.sink(packet)

    def _note_nonfinite(self, host: list) -> None:
        """nonfinite="every_step": exact counts from the step after the
        first one with a non-finite value, read here from the step's host
        copy (on CUDA the previous step's, whose copy is done by now: no
        wait on this step's work), so the switch depends on the data only."""
        pending, self._unchecked_host = self._unchecked_host, None
        if pending is not None:
            for p in pending:
                if isinstance(p, tuple):
                    p[1].synchronize()
            if not all(np.isfinite(p[0].numpy() if isinstance(p, tuple) else p).all() for p in pending):
                self.exact = True
                return
        ok = host_finite(host)
        if ok is None:
            self._unchecked_host = host
        elif not ok:
            self.exact = True
