"""The hooks: on a model (and its optimizer, criterion, scaler), one statistics vector per step.

:class:`Instrument` owns every hook it installs (forward hooks, parameter
post-accumulate-grad hooks, optimizer step hooks, the GradScaler wrapper) and
hands one :class:`~.collector.StepPacket` per training step to a sink (the
queue of the writer's worker thread). Nothing in a hook waits for the device:
statistics are 0-d/1-d tensors collected during the step, concatenated once
at the step's end and copied to the host once (see :mod:`.collector`).

Which modules are rows and what is measured for each comes from
:mod:`.modules`; when, from :mod:`.schedule`; the batches behind events are
kept by :mod:`.batches`.

Why one file: one class of about 600 lines, on purpose: its hooks share one step's state
(the collector, the schedule, the previous row's output) and run for every
module at every step, so the fast paths are inlined in its methods rather
than spread over more objects (each extra layer is a Python call per hook).
"""

from __future__ import annotations

import logging
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
from .collector import Collector, StepPacket
from .modules import (
    Behaviour,
    behaviour_of,
    first_tensor,
    is_compiled,
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


def _raise(e: BaseException) -> None:
    raise e


def _version_of(t: torch.Tensor) -> int | None:
    """The in-place version counter; None for inference tensors (which
    cannot be modified in place outside inference mode)."""
    try:
        return t._version
    except RuntimeError:
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
        # Written by the worker's thread, through count_nonfinite_exactly()
        # and fail_at_next_hook(); read by the hooks.
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
        # Parameter norms; a distributed run swaps in one that reduces over
        # shards (see .distributed).
        self.norms: Callable = S.foreach_norm
        # In a distributed run: gradients are measured after DDP's reducer
        # has written the all-reduced ones (see _on_backward_end).
        self.after_reduce = False
        self._requeued = False
        # For the "stepped by another optimizer" check (see _check_stepped).
        self._probe_version: int | None = None
        self._committed = False
        self.warned_unstepped = False
        self._reset_iteration()

        self._install()

    # -- iteration state --------------------------------------------------

    def _reset_iteration(self) -> None:
        self._col = Collector()
        # Gradients w.r.t. module outputs, from tensor hooks during backward.
        self._gout_col = Collector()
        self._gout_sums: list[torch.Tensor] = []
        self._gout_rows: list[int] = []
        self._seen_rows: set[int] = set()
        self._input_done = False
        self._threads: int | None = None  # torch.get_num_threads(), read at the step's input
        # (weakref to the last measured output, its row, its _version then)
        self._prev_out: tuple[Any, int, int | None] | None = None
        self._grad_col: Collector | None = None
        self._loss: torch.Tensor | None = None
        self._backward_queued = False
        # (params, rows, copies, norms) taken before an update; see _commit.
        self._upd_snapshot: tuple | None = self._next_upd_snapshot
        self._next_upd_snapshot = None

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
        h.append(entry.register_forward_pre_hook(self._on_model_input, with_kwargs=True))
        for name, m in self._watched:
            self._install_module(name, m)
        if entry is self.model and entry is not self.root:
            # Compiled: forward hooks are silent, so the rows exist from the
            # start, in definition order (their parameters are measured).
            for name, m in self._watched:
                self._row_for(name, m)
        if self.criterion is not None:
            h.append(self.criterion.register_forward_hook(self._on_loss, with_kwargs=True))
        else:
            # A model that computes its own loss (Hugging Face: output.loss).
            h.append(entry.register_forward_hook(self._on_model_output))
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
        h = self._handles
        h.append(m.register_forward_hook(self._make_forward_hook(name, m), with_kwargs=True))
        owned = [p for p in owned_params(m) if id(p) not in self._params_done]
        self._params_done.update(id(p) for p in owned)
        self._params_pending[id(m)] = owned
        for p in owned:
            h.append(p.register_post_accumulate_grad_hook(self._on_grad_accumulated))

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
                self._params_of_row[row] = self._params_pending[id(m)]

    def remove(self) -> None:
        """Remove every hook and the scaler wrapper. Safe to call twice."""
        if self._removed:
            return
        self._removed = True
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self._scaler_update is not None and self.scaler.__dict__.get("update") is self._scaler_update:
            del self.scaler.update
        self._col = Collector()
        self._gout_col = Collector()
        self._gout_sums, self._gout_rows = [], []
        self._grad_col = None
        self._upd_snapshot = self._next_upd_snapshot = None

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
    # Plain attribute stores (atomic under the GIL) that the hooks read at
    # their next call: the worker never waits for the training thread.

    def count_nonfinite_exactly(self) -> None:
        """From now on, count non-finite values exactly at every step (the
        worker saw one: before that, the cheap flag says "at least one")."""
        self.exact_nonfinite = True

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
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 -- anything, by design
            self._broken.add(part)
            msg = f"{distributed.tag()}: monitoring of the {part} failed and is switched off: {type(e).__name__}: {e}"
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

    # Every module hook starts with torch.compiler.is_compiling(): dynamo
    # traces hooks into the graph, and ours (weak references, Python state,
    # thread settings) would break it. Constant at trace time, so the hook
    # adds nothing to a compiled graph: inside one, only what runs outside
    # (parameters, gradients, the batch and loss at the wrapper) is measured.

    def _on_model_input(self, module, args, kwargs):
        if torch.compiler.is_compiling():
            return None
        self._raise_pending()
        # The model's input seen with autograd off is an evaluation forward:
        # modules running without autograd then are not a bug.
        self._outside = not torch.is_grad_enabled()
        if self._outside:
            return None
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
        self._guard("input", self._measure_input, args, kwargs)

    def _measure_input(self, args, kwargs) -> None:
        if self.config.save_batches:
            self.batches.keep(self.step, args, kwargs)
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
        xf = S.float_view(x)
        acc = S.acc_dtype(xf)
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
        if x.dim() >= 1:
            col.const(0, Key.VALUE, x.shape[0])  # the batch size, for the diagnosis (dead units need samples)

    def _make_forward_hook(self, name: str, m: nn.Module):
        behaviour = behaviour_of(m)
        instrument = weakref.ref(self)

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
                and not (self._sched_stats or self._sched_hist or self.exact_nonfinite)
            )
            and S.one_thread_pays(x, y)
        )
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
        # One value (a 0-d output, a [1, 1] score) has no spread: only its
        # non-finite flag and value, never a "constant activation".
        if not self._sched_stats or y.numel() == 1:
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
        self._gout_sums.append(g.sum(dtype=S.ACC_DTYPE.get(g.dtype)))  # no sync: the sum is the flag
        self._gout_rows.append(row)
        if self.exact_nonfinite:
            self._gout_col.add(S.nonfinite_count(g), row, Key.GOUT_NF)

    def _on_model_output(self, module, args, output):
        if torch.compiler.is_compiling():
            return None
        if torch.is_grad_enabled() and self._loss is None:
            loss = loss_of_output(output)
            if loss is not None:
                self._loss = loss.detach()
        return None

    def _on_loss(self, module, args, kwargs, output):
        if torch.compiler.is_compiling():
            return None
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

    def _check_leftovers(self) -> None:
        if self.facts.unchecked and not self._removed:
            self._guard("optimizer facts", self.facts.before_backward, self._col, *self._param_rows())

    def _on_grad_accumulated(self, param) -> None:
        # Runs once per parameter per backward; the first one of a backward
        # queues one callback at its end, where all gradients are complete and
        # not yet clipped by the user.
        if self._backward_queued or "backward" in self._broken or self._removed:
            return
        self._backward_queued = True
        self._check_leftovers()  # (without a hooked loss: here, once one gradient is in)
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

    def _measure_grads(self) -> Collector:
        col = Collector()
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
        col.add_many(self.norms(grads), grows, Key.GRAD_NORM, divisor=divisor)
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
        self._guard("optimizer facts", self.facts.commit, col, params, prow)
        if full and params:
            col.add_many(self.norms([p.detach() for p in params]), prow, Key.WEIGHT_NORM)
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
        self.batches.note_step(step, host)
        packet = StepPacket(step=step, rows=rows, keys=keys, layers=list(self.layers), stats=full, host=host)
        self._reset_iteration()
        self._committed = True
        self.step = step + 1
        self.sink(packet)
