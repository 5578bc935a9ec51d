"""The hooks on a model (and its optimizer, criterion, scaler): one statistics packet per step.

:class:`Instrument` installs every hook, follows each training step from
the model's input to the optimizer's step, and hands one
:class:`~.collector.StepPacket` per step to a sink (the worker's queue).
Nothing in a hook waits for the device: statistics are 0-d/1-d tensors
gathered during the step and copied to the host once, at its end.

What a step measures is decided on the training thread, from the schedule
and the step's own values, never from how far the worker lags: on full
steps (every ``stats_every``) every module; on cheap steps, with
``nonfinite="replay"``, no module unless the step's check finds a
non-finite value, which re-runs the step with every count on; with
``nonfinite="every_step"`` every module's non-finite flag.

Its collaborators, each with explicit inputs: :mod:`.forward` (the
per-module hooks and the step state they share), :mod:`.backward` (where
the backward starts and ends), :mod:`.params` (rows, parameters, gradient
and weight norms), :mod:`.step_check` and :mod:`.replay` (the non-finite
check and the re-run), :mod:`.pseudo_rows` (batch, loss, learning rate),
:mod:`.step_facts`, :mod:`.guard`.
"""

from __future__ import annotations

import warnings
import weakref
from time import perf_counter_ns
from typing import Any, Callable

import torch
from torch import nn

from .. import distributed
from ..batches import BatchKeeper
from ..modules import first_tensor, is_compiled, iter_tensors, loss_of_output, owned_params, select_modules, unwrap
from ..run.costs import StepClock
from ..schedule import WatchConfig
from ..step import stats
from ..step.collector import Collector, StepPacket
from ..step.slots import Key
from . import replay
from .backward import BackwardHooks
from .forward import ForwardHooks
from .gcpause import gc_paused
from .guard import HookGuard
from .params import GradientReading, RowTable, add_update_norms, grads_scaled, measure_gradients, snapshot_weights
from .pseudo_rows import (LabelFrequencies, add_step_scalars, classes_of, loss_layer_extras, recorded_loss,
                          target_facts, without_loss_levels)
from .step_check import NonfiniteCheck, reproduced, scaler_decides
from .step_facts import StepFacts

__all__ = ["Instrument"]


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
        self.model, self.root = model, unwrap(model)
        self.sink, self.config = sink, config
        self.optimizer, self.scaler = optimizer, scaler
        self.criterion = criterion if isinstance(criterion, nn.Module) else None
        if criterion is not None and self.criterion is None:
            warnings.warn(
                "tb_neuraldbg: criterion is not an nn.Module and cannot be hooked; "
                "pass the loss with writer.record(loss=loss) for the <loss> row",
                stacklevel=3,
            )
        self.step = int(config.start_step)
        self.backwards = self.commits = 0  # backward passes followed, steps recorded (commit_never_stepped)
        self._frequencies = LabelFrequencies()  # the run's label counts (prior_loss), see _on_loss
        self.guard = HookGuard()
        self.check = NonfiniteCheck(config.nonfinite)
        self.backward = BackwardHooks(self._on_backward_start, self._on_backward_end, self._backward_failed)
        self.rows = RowTable(self.backward.hook_params)
        self.facts = StepFacts(optimizer)  # host-side facts: leftover gradients, param groups
        self.fwd = ForwardHooks(self.guard, self.rows, self.check, self.facts)
        self.batches = BatchKeeper()  # the worker saves the batch behind an event from here
        self.clock = StepClock()  # the loop's pace, for stats_info
        # Written by the worker's thread through fail_at_next_hook(); read by the hooks.
        self.pending_failure: BaseException | None = None
        # K of a K-class cross-entropy criterion, for the diagnosis' initial-loss check (ln K).
        self.num_classes: int | None = None
        # Parameter and gradient norms; a distributed run swaps in ones that
        # reduce over shards (see .distributed).
        self.norms: Callable = stats.stacked_norms
        self.grad_norms: Callable = stats.stacked_norms
        self._handles: list = []
        self._scaler_update: Callable | None = None
        self._watched = select_modules(model, config.include, config.exclude, config.max_layers)
        # Without an optimizer, the weights of a record() before the next
        # update (see _commit); taken over by the next iteration.
        self._next_upd_snapshot: tuple | None = None
        self._find_devices()
        self._reset_iteration()
        self._install()

    def _reset_iteration(self) -> None:
        """The state of one step, from its forward to its commit."""
        self.rows.new_step()
        self.backward.new_step()
        self.fwd.new_step(self.step, self.config.is_stats(self.step), self.config.is_hist(self.step))
        self._loss: torch.Tensor | None = None
        self._targets: list = []  # what <loss> records of the criterion's targets (full steps), see _commit
        # The gradients as the step's backward left them (None until measured).
        self._grads: GradientReading | None = None
        # (params, rows, copies, norms) taken before an update; see _commit.
        self._upd_snapshot: tuple | None = self._next_upd_snapshot
        self._next_upd_snapshot = None
        # nonfinite="replay": what the step's first forward left for a
        # re-run; whether the step was checked; the re-run's measurements.
        self._capture: replay.StepCapture | None = None
        self._checked = False
        self._replay_col: Collector | None = None

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
        self.fwd.compiled = entry is not self.root
        h.append(entry.register_forward_pre_hook(self._on_model_input, with_kwargs=True))
        # Where the backward starts (one tensor hook a step on the outputs),
        # and the model's own loss when there is no criterion.
        h.append(entry.register_forward_hook(self._on_model_output, with_kwargs=True))
        for name, m in self._watched:
            self._install_module(name, m)
        if self.fwd.compiled:
            # Compiled: forward hooks are silent, so the rows exist from the
            # start, in definition order (their parameters are measured).
            for name, m in self._watched:
                self.rows.row_for(name, m)
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
                    inst.guard.run("scaler", inst._commit)  # before the scale changes
                return original(*args, **kwargs)

            self._scaler_update = update
            # GradScaler has no hook API: shadow the bound method on this
            # instance only, and restore it in remove().
            self.scaler.update = update

    def _install_module(self, name: str, m: nn.Module) -> None:
        self.fwd.watch(name, m)
        self.rows.watch(name, m, owned_params(m))

    def add_modules(self, modules: list) -> None:
        """Watch ``[(name, module)]`` added to the model after watch(): their
        rows are appended when they first run."""
        if self.guard.removed:
            return
        for name, m in modules:
            self._watched.append((name, m))
            self._install_module(name, m)

    def remove(self) -> None:
        """Remove every hook and the scaler wrapper. Safe to call twice."""
        if self.guard.removed:
            return
        self.guard.removed = True
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.backward.remove()
        self.fwd.clear()
        if self._scaler_update is not None and self.scaler.__dict__.get("update") is self._scaler_update:
            del self.scaler.update
        self._grads = self._capture = self._replay_col = None
        self._upd_snapshot = self._next_upd_snapshot = None

    def release(self) -> None:
        """Drop the references to recent batches (after the worker is done
        with the steps that might need them) and, once the hooks are off, to
        the model, its parameters, the optimizer, criterion and scaler: a
        handle or writer kept after close() must not keep them alive."""
        self.batches.clear()
        if self.guard.removed:
            self.model = self.root = None
            self.optimizer = self.criterion = self.scaler = None
            self.facts.release()
            self._watched = []
            self.rows.release()
            self._loss = None

    # -- what the writer and the tests read -----------------------------------

    @property
    def layers(self) -> list[dict]:
        """The rows' layers (name, type), in row order."""
        return self.rows.layers

    @property
    def mode(self) -> str:
        """How non-finite values are found now: "replay" or "every_step"."""
        return self.check.mode

    @property
    def exact(self) -> bool:
        """Whether the hooks count non-finite values exactly now."""
        return self.check.exact

    @property
    def replays(self) -> int:
        """The steps re-run so far."""
        return self.check.replays

    @property
    def hook_ns(self) -> int:
        """Nanoseconds spent in the hooks' bodies so far (replays included)."""
        return self.guard.hook_ns

    @property
    def removed(self) -> bool:
        """True once :meth:`remove` ran: the hooks are off."""
        return self.guard.removed

    # -- from the worker's thread -----------------------------------------
    # A plain attribute store (atomic under the GIL) that the hooks read at
    # their next call: the worker never waits for the training thread, and
    # never changes what is measured.

    def fail_at_next_hook(self, failure: BaseException) -> None:
        """Raise ``failure`` in the training thread at the next model input,
        optimizer step or record (``on_error="raise"``)."""
        self.pending_failure = failure

    def _raise_pending(self) -> None:
        failure = self.pending_failure
        if failure is not None:
            self.pending_failure = None
            raise failure

    # -- forward ----------------------------------------------------------
    # Every hook starts with torch.compiler.is_compiling(): see .forward.

    def _on_model_input(self, module, args, kwargs):
        if torch.compiler.is_compiling():
            return None
        fwd = self.fwd
        if fwd.replaying:
            fwd.measure_input_replay(args, kwargs)
            return None
        self._raise_pending()
        fwd.outside = not torch.is_grad_enabled()
        if fwd.outside or self.guard.removed:
            return None
        fwd.root_input = True
        if self.check.mode == "replay" and self._capture is None:
            # Before the forward: the RNG and autocast state it starts from.
            self._capture = self.guard.run(
                "replay", replay.capture, args, kwargs, self._cuda_devices, self._device_types
            )
        self.observe_input(args, kwargs)
        return None

    def observe_input(self, args, kwargs) -> None:
        """Measure this step's batch (the ``<input>`` row, the kept batch),
        once a step. The model's input hook calls it; a framework's callback
        does too, with the batch it hands the user's step (a LightningModule's
        training_step may never call the model itself)."""
        if self.fwd.input_done or self.guard.removed or not torch.is_grad_enabled():
            return
        if self.config.save_batches:
            self.guard.run("input", self.batches.keep, self.step, args, kwargs)
        self.fwd.measure_input(args, kwargs)

    def _on_model_output(self, module, args, kwargs, output):
        if torch.compiler.is_compiling() or self.fwd.replaying or self.guard.removed or not torch.is_grad_enabled():
            return None
        if self.criterion is None and self._loss is None:
            # A model that computes its own loss (Hugging Face: output.loss).
            loss = loss_of_output(output)
            if loss is not None:
                self._loss = loss.detach()
        self.guard.run("backward", self._follow_outputs, output)
        return None

    def _follow_outputs(self, output) -> None:
        """A hook on each output tensor: where the backward starts, it queues
        the measurement of the gradients at the backward's end (one hook a
        step, not one per parameter); on the step's first call it also keeps
        the gradient for a replay, unless the criterion can give it again."""
        cap = self._capture
        if cap is not None and cap.outputs is not None:
            cap = None  # kept from the first call of the step only
        outs = list(iter_tensors(output))[: replay.MAX_OUTPUTS]
        if cap is not None:
            cap.outputs = [weakref.ref(t) for t in outs]
        for i, t in enumerate(outs):
            if t.requires_grad and not t.is_leaf:
                t.register_hook(self._make_output_hook(i, cap))

    def _make_output_hook(self, index: int, cap: replay.StepCapture | None):
        instrument = weakref.ref(self)
        step = self.step
        keep = cap.keep_grad(index) if cap is not None else None

        def hook(grad):
            inst = instrument()
            if inst is not None and inst.step == step:
                inst.backward.at_output = True
                inst.backward.start()
                if keep is not None:
                    keep(grad)
            return None

        return hook

    def _on_loss(self, module, args, kwargs, output):
        if torch.compiler.is_compiling() or self.fwd.replaying or not torch.is_grad_enabled():
            return None
        if not (self.fwd.input_done or self.fwd.seen_rows):
            # Nothing of the watched model ran in this step yet (neither its
            # forward nor a watched module called directly): the criterion
            # scores another model (one loss module shared with a baseline),
            # whose backward must not be read as this model's.
            return None
        cap = self._capture
        if cap is not None:
            self.guard.run("replay", cap.note_criterion, args, kwargs, replay.autocast_state(self._device_types))
        if self._loss is None:
            self.guard.run("loss", self._measure_loss, module, args, output)
        return None

    def _measure_loss(self, module, args, output) -> None:
        if self.num_classes is None:
            self.num_classes = classes_of(module, args)
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
        if self.config.is_stats(self.step):
            self._targets = target_facts(module, args, self._frequencies)

    # -- backward ---------------------------------------------------------

    @gc_paused
    def _check_leftovers(self, fresh=None) -> None:
        if self.facts.unchecked and not self.guard.removed:
            layout = self.rows.layout()
            self.guard.run("optimizer facts", self.facts.before_backward, self.fwd.col, layout.params, layout.rows, fresh)

    def _on_backward_start(self, fresh) -> bool:
        """Follow this backward (see :class:`.backward.BackwardHooks`)? Then
        look for gradients left over from the last step, here where it
        starts (a hooked loss looked already)."""
        if self.fwd.replaying or "backward" in self.guard.broken or self.guard.removed:
            return False
        self._check_leftovers(fresh)
        self.backwards += 1
        return True

    def commit_never_stepped(self) -> int:
        """Backward passes followed while the watched optimizer never stepped (0 once one did), at
        remove()/close(): the step in progress is then recorded once, with that count on <optimizer>
        (``steps_missing``, docs/FORMAT.md); no replay, nothing from inside a hook (a signal's close)."""
        n = self.backwards if self.optimizer is not None and self.commits == 0 and not self.guard.removed else 0
        if n and not self.guard.busy:
            self._checked = True
            self.guard.run("close", self._commit, n)
        return n

    def _backward_failed(self) -> None:
        self.guard.broken.add("backward")

    def _on_backward_end(self) -> None:
        self.guard.run("optimizer check", self.facts.check_stepped, self.rows.first_trainable(), distributed.tag)
        grads = self.guard.run("backward", self._measure_grads)
        if grads is not None:
            self._grads = grads  # with accumulation, the last backward wins

    def _divisor(self) -> torch.Tensor | None:
        """The GradScaler's scale while the gradients still carry it."""
        return self.scaler._scale.detach() if grads_scaled(self.scaler, self.optimizer) else None

    @gc_paused
    def _measure_grads(self) -> GradientReading:
        return measure_gradients(self.rows.layout(), self._divisor(), self.check.exact, self.grad_norms)

    # -- the step's check and its replay -------------------------------------

    def _check_step(self, at_commit: bool) -> None:
        """Once a step, before its gradients are used (at the optimizer's
        step pre-hook, else at the commit): with nonfinite="replay", re-run
        the step when what it computed anyway has a non-finite value."""
        if self._checked:
            return
        self._checked = True
        if self._grads is None:
            # No backward seen through the model's output (grads set by hand,
            # a loss from an inner tensor): measured now, and from now on the
            # backward is followed through every parameter.
            self._grads = self._measure_grads()
            if self._grads.norms is not None:
                self.backward.use_params(self.rows.layout().params)
        elif self.backward.at_output and self.backward.per_param:
            self.backward.use_outputs()
        if self.check.mode != "replay":
            return
        cap, self._capture = self._capture, None
        if scaler_decides(self.scaler, self.optimizer):
            dirty = at_commit and self._grads is not None
        else:
            self.fwd.flush_gout_sums(self.fwd.col)  # (joined to the step's values now: stacked once)
            dirty = self.check.is_dirty([self.fwd.col, self._grads.col], self._loss)
            if dirty:  # (on CUDA the one place that knows it before the worker: keep its batch)
                self.batches.note_nonfinite(self.step)
        if dirty:
            self._replay(cap)

    def _replay(self, cap: replay.StepCapture | None) -> None:
        """Re-run the step with every count on; its measurements join the
        step's row. Falls back to the every-step flags when it cannot."""
        if cap is None:
            self.check.fall_back(self.step, "no batch was kept (no forward of the watched model under grad this step)")
            return
        saved = self.fwd.begin_replay()
        params = [p for p in self.root.parameters() if p.requires_grad]
        scale = self._divisor()
        try:
            loss, grads = replay.rerun(self.root, self.criterion, cap, params, scale, self._cuda_devices)
            col = self.fwd.col
            self.fwd.flush_gout(col)
            layout = self.rows.layout()
            rows_of = dict(zip(map(id, layout.params), layout.rows))
            step_norms = self._grads.norms if self._grads is not None else None
            problem = reproduced(self._loss, loss, step_norms, params, grads, rows_of, col, scale)
        except Exception as e:  # noqa: BLE001 -- a model that cannot re-run: flags instead
            problem = f"{type(e).__name__}: {e}"
        finally:
            col = self.fwd.end_replay(saved)
        self.check.replays += 1
        if problem:
            self.check.fall_back(self.step, problem)
        else:
            self._replay_col = col

    # -- optimizer and commit ----------------------------------------------

    def _on_step_pre(self, optimizer, args, kwargs):
        self._raise_pending()
        self.guard.run("optimizer", self._before_update)
        return None

    @gc_paused
    def _before_update(self) -> None:
        self._check_step(at_commit=False)
        if self.config.is_update(self.step) and self._upd_snapshot is None:
            self._upd_snapshot = snapshot_weights(self.rows.layout(), self.norms)

    def _on_step_post(self, optimizer, args, kwargs):
        if self.scaler is None:
            self.guard.run("optimizer", self._commit)
        return None

    def record(self, step: int | None = None, loss=None) -> None:
        """Record one step by hand (no optimizer watched), after backward.

        With an optimizer watched this only attaches ``loss`` to the step
        that the next ``optimizer.step()`` records. A ``loss`` that is not a
        tensor, a number or a sequence of numbers raises ``TypeError``
        (before anything is recorded: the call can be made again).
        """
        self._raise_pending()
        if self.optimizer is not None and step is not None:
            raise ValueError(
                "with an optimizer watched, each optimizer.step() records a step; "
                "record(loss=...) only attaches the loss (pass no step)"
            )
        if loss is not None:
            given = recorded_loss(loss)
            if self._loss is not None and given.data_ptr() != self._loss.data_ptr():  # (not the criterion's)
                self._targets = without_loss_levels(self._targets)
            self._loss = given
        if self.optimizer is not None:
            return
        if step is not None:
            self.step = int(step)
        self.guard.run("record", self._commit)

    @gc_paused
    def _commit(self, unstepped: int = 0) -> None:
        """The step's end: its values gathered into one packet for the sink (``unstepped``: commit_never_stepped)."""
        self.commits += 1
        step = self.step
        full = self.config.is_stats(step)
        loss_row, opt_row = self.rows.pseudo_rows()
        if self.criterion is not None and "squash" not in self.rows.layers[loss_row]:
            # what the criterion applies to its input itself (the diagnosis' loss floor), its targets' domain
            self.rows.layers[loss_row].update(loss_layer_extras(self.criterion))
        fwd = self.fwd
        col = fwd.col
        self.guard.run("replay", self._check_step, True)
        light = fwd.light and self._replay_col is None
        if self._replay_col is not None:
            col.extend(self._replay_col)
        grads = self._grads
        if grads is not None:
            col.extend(grads.col)
        fwd.flush_gout(col)
        layout = self.rows.layout()
        fwd.note_no_grad_rows()
        self.guard.run("optimizer facts", self.facts.commit, col, layout.params, layout.rows)
        if full and layout.params:
            with torch.no_grad():  # (no detached copies: each costs a call per parameter)
                col.add_many(self.norms(layout.params), layout.rows, Key.WEIGHT_NORM)
        if self._upd_snapshot is not None:
            # (without an optimizer the gradients read now are the next update's)
            add_update_norms(col, self._upd_snapshot, self.norms, lost=self.optimizer is not None)
        if self.optimizer is None and self.config.is_update(step + 1):
            # Without optimizer hooks the update happens after record():
            # compare the weights of this record with the next one.
            self._next_upd_snapshot = snapshot_weights(layout, self.norms) if layout.params else None
        add_step_scalars(col, self._loss, self.optimizer, self.scaler, loss_row, opt_row)
        if unstepped:
            col.const(opt_row, Key.STEPS_MISSING, float(unstepped))
        for value, key in self._targets:
            col.add(value, loss_row, key)
        host, rows, keys = col.finish()
        self.batches.note_step(step, host)
        if self.check.mode == "every_step":
            self.check.note_nonfinite(host)
        missing = grads.missing_rows if grads is not None else None
        ran = fwd.rows_that_ran(light, missing)
        # Without the hooks, a module that runs without giving its parameters a
        # gradient (conditional computation, a bug) could not be told apart.
        fwd.followable = fwd.root_input and missing is not None and not len(missing)
        packet = StepPacket(
            step=step, rows=rows, keys=keys, layers=list(self.rows.layers), stats=full, host=host, ran=ran,
            num_classes=self.num_classes,
        )
        self.step = step + 1
        now = perf_counter_ns()
        self.clock.tick(now, self.guard.ns_until(now))
        self._reset_iteration()  # (schedules the next step: after the step moved)
        self.facts.stepped()
        self.sink(packet)
