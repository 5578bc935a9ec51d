"""The per-module hooks: what the forward pass of a step measures, and the step state they share.

:class:`ForwardHooks` puts a forward hook on every watched module (and, on
full steps, a pre-hook on the autograd node of its output, for the gradient
that flows back into it) and measures the batch. Every measurement goes to
the step's :class:`~.collector.Collector` (``col``) as device tensors; the
instrument reads that collector at the step's end.

Why one class: these hooks run for every module at every step and share
one step's state (the collector, the schedule, the previous row's output,
the thread setting), which they read as attributes of one object; each
extra layer between a hook and that state is a Python call per module.
What a hook measures is :func:`.module_stats.measure_values`; when, from
the schedule the instrument gives :meth:`ForwardHooks.new_step`.
"""

from __future__ import annotations

import warnings
import weakref
from operator import attrgetter
from typing import Any

import numpy as np
import torch
from torch import nn

from .. import distributed
from ..modules import Behaviour, behaviour_of, first_tensor, iter_tensors, not_dense
from ..step import stats
from ..step.collector import CHUNK, Collector
from ..step.slots import Key
from .guard import HookGuard
from .module_hooks import ModuleHooks
from .module_stats import measure_values
from .params import RowTable
from .pseudo_rows import batch_tensor, measure_batch, measure_empty_batch
from .step_check import NonfiniteCheck
from .step_facts import StepFacts

__all__ = ["ForwardHooks"]

_REQUIRES_GRAD = attrgetter("requires_grad")


def _version_of(t: torch.Tensor) -> int | None:
    """The in-place version counter; None for inference tensors (which
    cannot be modified in place outside inference mode)."""
    try:
        return t._version
    except RuntimeError:
        return None


class _GoutHook:
    """The gradient w.r.t. a module's output (or, ``norm_key=Key.GIN_NORM``,
    its first input), seen during the backward of the step it was
    registered in only. It measures, never changes the gradient (returns
    None), and holds no reference to the graph. ``flag``: its non-finite
    flag (and exact count); ``norm_key``: its L2 norm under that key (full
    steps: bwd_gain), or None.

    One small object per module and full step (not a closure, whose cells
    are more objects for Python's garbage collector to follow until the
    backward)."""

    __slots__ = ("hooks", "step", "row", "index", "flag", "norm_key")

    def __init__(self, hooks: "weakref.ref[ForwardHooks]", step: int, row: int, index: int,
                 flag: bool = True, norm_key: int | None = None):
        self.hooks = hooks
        self.step = step
        self.row = row
        self.index = index
        self.flag = flag
        self.norm_key = norm_key

    def __call__(self, grad_outputs):
        fwd = self.hooks()
        if fwd is not None and fwd.step == self.step:
            fwd.guard.run("output gradients", fwd._measure_gout, self.row, grad_outputs[self.index],
                          self.flag, self.norm_key)
        return None


class ForwardHooks:
    """Every watched module's forward hook, and the step state they share.

    Its inputs: ``guard`` runs every hook body; ``rows`` gives each module
    its row; ``check`` says how non-finite values are found (its ``mode``
    and ``exact``); ``facts`` hears of modules run without autograd. The
    instrument starts each step with :meth:`new_step` and swaps the state
    for a replay with :meth:`begin_replay` / :meth:`end_replay`.
    """

    def __init__(self, guard: HookGuard, rows: RowTable, check: NonfiniteCheck, facts: StepFacts):
        self.guard = guard
        self.rows = rows
        self.check = check
        self.facts = facts
        self.module_hooks = ModuleHooks()
        self._ref = weakref.ref(self)  # shared by the output-gradient hooks
        # Set by the instrument: the step can be followed without the module
        # hooks (the model's own input hook saw the last step's forward and
        # every trainable parameter got a gradient); the model is compiled
        # (its hooks are traced: they stay on).
        self.followable = False
        self.compiled = False
        # The model's input was seen with autograd off (an evaluation
        # forward): modules running without autograd then are not a bug.
        self.outside = False
        self.replaying = False  # inside replay.rerun
        self.nf_only = False  # a full step's replay: counts only
        # Rows that ran, and rows that ran without autograd, at the last
        # step the module hooks were on: a cheap step without them repeats them.
        self._last_ran: Any = None
        self._last_no_grad: frozenset = frozenset()
        self._not_dense_said: set[str] = set()  # modules said to return a tensor that is not dense
        self.new_step(0, False, False)

    # -- the step -----------------------------------------------------------

    def new_step(self, step: int, stats_step: bool, hist_step: bool) -> None:
        """Start ``step``: fresh state; every statistic on ``stats_step``,
        histograms on ``hist_step``; module hooks off on a cheap step that
        can do without them."""
        self.step = step
        self.col = Collector()
        self.gout_col = Collector()  # exact counts of output gradients
        self._gout_sums: list[torch.Tensor] = []  # their sums (the flags), stacked in chunks
        self._gout_rows: list[int] = []
        self.seen_rows: set[int] = set()
        self.input_done = False
        self.root_input = False  # the model's own input hook saw this step's forward
        self.threads: int | None = None  # torch.get_num_threads(), read at the step's input
        # The batch requires grad, or was not seen: its own gradient may
        # take a non-finite value that no parameter's gradient shows.
        self.batch_grad = True
        # (weakref to the last measured output, its row, its _version then)
        self.prev_out: tuple[Any, int, int | None] | None = None
        self.stats = stats_step
        self.hist = hist_step
        # A cheap step of nonfinite="replay": the module hooks only note
        # that their module ran, or are off.
        self.light = self.check.mode == "replay" and not stats_step and not self.replaying
        self._sync_module_hooks()

    def _sync_module_hooks(self) -> None:
        """Module forward hooks off for a cheap step, on for any other.

        A cheap step's hooks would only note that their module ran. So they
        come off while the model's own input hook follows the steps and
        every trainable parameter gets a gradient: not for a compiled model,
        whose hooks are traced, nor when the step does not go through the
        model's forward, nor with conditional computation, whose skipped
        modules only the hooks can tell. The rows that ran are those of the
        last step with the hooks on."""
        off = self.light and self.followable and not self.compiled and not self.guard.removed
        try:
            self.module_hooks.set_off(off)
        except Exception as e:  # noqa: BLE001 -- PyTorch's hook dicts changed: hooks on from now on
            self.guard.fail("cheap steps without module hooks", e)  # (warned once)

    def begin_replay(self) -> tuple:
        """Fresh state for re-running the step with every count on (only
        the counts where the step was a full one); returns what
        :meth:`end_replay` puts back."""
        saved = (
            self.col, self.gout_col, self._gout_sums, self._gout_rows, self.seen_rows, self.input_done,
            self.prev_out, self.light, self.check.exact, self.stats, self.hist,
        )
        self.nf_only = self.stats
        self.col, self.gout_col, self._gout_sums, self._gout_rows = Collector(), Collector(), [], []
        self.seen_rows, self.input_done, self.prev_out = set(), False, None
        self.light, self.check.exact, self.stats, self.hist = False, True, False, False
        self.replaying = True
        self._sync_module_hooks()  # (on for the re-run)
        return saved

    def end_replay(self, saved: tuple) -> Collector:
        """Put the step's state back; returns the re-run's measurements."""
        col = self.col
        self.flush_gout(col)
        (
            self.col, self.gout_col, self._gout_sums, self._gout_rows, self.seen_rows, self.input_done,
            self.prev_out, self.light, self.check.exact, self.stats, self.hist,
        ) = saved
        self.replaying = self.nf_only = False
        self._sync_module_hooks()
        return col

    def flush_gout_sums(self, col: Collector) -> None:
        """The output gradients' sums gathered so far, stacked into ``col``."""
        if self._gout_sums:
            col.add_many(self._gout_sums, self._gout_rows, Key.GOUT_SUM)
            self._gout_sums, self._gout_rows = [], []

    def flush_gout(self, col: Collector) -> None:
        """Every output-gradient measurement of the step into ``col``."""
        self.flush_gout_sums(col)
        col.extend(self.gout_col)
        self.gout_col = Collector()

    def note_no_grad_rows(self) -> None:
        """At the step's end: the rows that ran without autograd, as at the
        last step whose hooks could see them when they are off now."""
        if self.module_hooks.off:
            for r in self._last_no_grad:
                self.facts.ran_without_grad(r)
        else:
            self._last_no_grad = self.facts.no_grad_rows

    def rows_that_ran(self, light: bool, missing) -> Any:
        """The rows a cheap step says ran (its hooks only noted them, or
        were off: then those of the last step with the hooks on, less the
        ``missing`` ones, whose parameters got no gradient); None for a
        step whose modules were measured."""
        if not self.module_hooks.off:
            self._last_ran = np.fromiter(self.seen_rows, dtype=np.int64, count=len(self.seen_rows))
            return self._last_ran if light else None
        if not light:
            return None  # (replayed: measured)
        ran = self._last_ran
        if missing is None or len(missing):
            # A module that got no gradient may not have run (an unrouted
            # expert): not said to have, and the hooks back from the next step.
            ran = np.setdiff1d(ran, missing) if missing is not None else ran[:0]
        return ran

    def clear(self) -> None:
        """Drop the step's tensors (after the hooks are removed)."""
        self.module_hooks.remove()
        self.col, self.gout_col, self._gout_sums, self._gout_rows = Collector(), Collector(), [], []
        self.prev_out = None

    # -- the batch ------------------------------------------------------------

    def measure_input(self, args, kwargs) -> None:
        """The step's batch (the ``<input>`` row), once a step."""
        if self.input_done:
            return
        self.input_done = True
        self.threads = torch.get_num_threads()  # once a step, for one_thread
        self.guard.run("input", self._measure_input, args, kwargs)

    def _measure_input(self, args, kwargs) -> None:
        self.batch_grad = any(map(_REQUIRES_GRAD, iter_tensors((args, kwargs))))
        x = batch_tensor(args, kwargs)
        if x is None:
            measure_empty_batch(self.col, args, kwargs)
            return
        if x.is_floating_point():
            # The first module usually gets this very tensor: it then reuses
            # these statistics instead of reading the batch again.
            self.prev_out = (weakref.ref(x), 0, _version_of(x))
        if x.requires_grad:  # (a batch seldom does: the detached alias is cheap)
            x = x.detach()
        with stats.one_thread(x, threads=self.threads):
            measure_batch(self.col, x, self.stats, self.check.exact)

    def measure_input_replay(self, args, kwargs) -> None:
        """The batch's non-finite count in a replay, once."""
        if self.input_done:
            return
        self.input_done = True
        self.guard.run("replay", self._measure_input_replay, args, kwargs)

    def _measure_input_replay(self, args, kwargs) -> None:
        x = batch_tensor(args, kwargs)
        if x is None:
            return
        if x.is_floating_point():
            self.prev_out = (weakref.ref(x), 0, _version_of(x))
        self.col.add(stats.nonfinite_count(x.detach()), 0, Key.OUT_NF)

    # -- the modules ------------------------------------------------------------

    def watch(self, name: str, m: nn.Module) -> None:
        """Hook ``m``, watched as ``name``."""
        self.module_hooks.add(m, self._make_forward_hook(name, m))

    def _make_forward_hook(self, name: str, m: nn.Module):
        behaviour = behaviour_of(m)
        ref = self._ref
        row_of = self.rows.row_of

        # Every module hook starts with torch.compiler.is_compiling(): dynamo
        # traces hooks into the graph, and ours (weak references, Python
        # state, thread settings) would break it. Constant at trace time, so
        # the hook adds nothing to a compiled graph.
        def hook(module, args, kwargs, output):
            if torch.compiler.is_compiling():
                return None
            fwd = ref()
            if fwd is None:
                return None
            if not torch.is_grad_enabled():
                if fwd.input_done and not fwd.outside:  # no_grad() inside the training forward
                    fwd.guard.run("optimizer facts", fwd.facts.ran_without_grad, fwd.rows.row_for(name, m))
                return None
            if fwd.light:
                # A cheap step of nonfinite="replay": only note that it ran.
                row = row_of.get(name)
                if row is not None:
                    fwd.seen_rows.add(row)
                    return None
            # The watched module itself (not a DataParallel replica) names the row.
            fwd.guard.run("forward", fwd._measure_module, name, m, behaviour, args, kwargs, output)
            return None

        return hook

    def _measure_module(self, name, module, behaviour: Behaviour, args, kwargs, output) -> None:
        row = self.rows.row_for(name, module)
        if row in self.seen_rows:
            return  # measured at its first call of the step (weight sharing, loops)
        self.seen_rows.add(row)
        if self.light:
            return  # first seen at a cheap step: a row now, measured from the next full step
        x = first_tensor(args) if args else None
        if x is None and kwargs:
            x = first_tensor(kwargs)
        if x is not None and not (not_dense(x) is None and x.is_floating_point() and x.numel() > 0):
            x = None
        y = first_tensor(output)
        if y is not None:
            # A sparse (nested, quantised, meta) output is skipped as a
            # non-float one is: torch's reductions refuse it, and the failure
            # would switch every module's monitoring off
            # (tests/test_sparse_outputs.py).
            kind = not_dense(y)
            if kind is not None:
                self._say_not_dense(name, module, kind)
                y = None
            elif not (y.is_floating_point() and y.numel() > 0):
                y = None
        same_as_prev = False
        nf_only = self.nf_only
        if x is not None:
            prev = self.prev_out
            # The very tensor the previous row output, not modified in place
            # since it was measured: its statistics are this input's. (An
            # in-place module, whose output is its input, has changed it
            # itself: the previous row's statistics are still its input's.)
            same_as_prev = prev is not None and prev[0]() is x and (y is x or _version_of(x) == prev[2])
            if same_as_prev:
                if not nf_only:  # a full step's replay: the step has it already
                    self.col.const(row, Key.IN_REF, prev[1])  # same tensor: reuse its statistics
                x = None
        if y is not None:
            self.prev_out = (weakref.ref(y), row, _version_of(y))
        measure_values(
            self.col, row, module, behaviour, x, y, same_as_prev, nf_only,
            self.threads, self.stats, self.hist, self.check.exact,
        )
        # A full step's gradient norms, for bwd_gain (not in a replay: the
        # step has them). The gradient this module passes to an input that
        # is a row's output is that row's output gradient (slots); to one
        # measured here, its own hook (not an in-place module's: its input
        # is its output by now).
        norms = self.stats and not self.replaying
        if norms and x is not None and x is not y and x.requires_grad and x.grad_fn is not None:
            x.grad_fn.register_prehook(_GoutHook(self._ref, self.step, row, x.output_nr, False, Key.GIN_NORM))
        if y is not None and y.requires_grad and not y.is_leaf:
            norm_key = Key.GOUT_NORM if norms else None
            if self.check.mode == "replay" and not (self.replaying or self.batch_grad):
                # With a batch that does not require grad, a non-finite
                # output gradient reaches a parameter's gradient (in the
                # step's norms: then the step is replayed, with every output
                # gradient read). So a full step reads no flag and its flag is
                # 0 where the step's evidence is clean (slots.assemble).
                self.col.const(row, Key.GOUT_CLEAN, 1)
                if norms:
                    y.grad_fn.register_prehook(_GoutHook(self._ref, self.step, row, y.output_nr, False, norm_key))
                return
            # A leaf (a parameter returned as is) would keep the hook beyond
            # the step; a non-leaf's hook dies with its graph. On the node
            # that made ``y``, not on ``y`` (a node's pre-hook is the
            # cheaper registration): the same gradient, the one a tensor
            # hook registered now would get (an in-place op on ``y`` later
            # makes a new node; this one still gets the gradient w.r.t. the
            # value measured here).
            y.grad_fn.register_prehook(_GoutHook(self._ref, self.step, row, y.output_nr, True, norm_key))

    def _say_not_dense(self, name: str, module, kind: str) -> None:
        if name not in self._not_dense_said:
            self._not_dense_said.add(name)
            warnings.warn(
                f"{distributed.tag()}: module {name!r} ({type(module).__name__}) returns a {kind} tensor, "
                "which is not measured (only dense ones are); the rest of the model is watched",
                RuntimeWarning,
                stacklevel=2,
            )

    def _measure_gout(self, row: int, g: torch.Tensor, flag: bool = True, norm_key: int | None = None) -> None:
        if g is None or not_dense(g) is not None or not g.is_floating_point() or g.numel() == 0:
            return
        g = g.detach()
        threads = self.threads
        if threads is not None and threads > 1 and stats.one_thread_pays(g):
            torch.set_num_threads(1)
            try:
                self._measure_gout_values(row, g, flag, norm_key)
            finally:
                torch.set_num_threads(threads)
        else:
            self._measure_gout_values(row, g, flag, norm_key)

    def _measure_gout_values(self, row: int, g: torch.Tensor, flag: bool, norm_key: int | None) -> None:
        if norm_key is not None:
            # With the exact counts: joined to the step at its end, not
            # read by the step check (a norm can overflow where no value is
            # non-finite).
            self.gout_col.add(stats.l2_norm(g), row, norm_key)
        if not flag:
            return
        if not self.nf_only:
            sums = self._gout_sums
            sums.append(g.sum(dtype=stats.ACC_DTYPE.get(g.dtype)))  # no sync: the sum is the flag
            self._gout_rows.append(row)
            if len(sums) >= CHUNK:  # stacked before they grow old (see collector.CHUNK)
                self.col.add_many(sums, self._gout_rows, Key.GOUT_SUM)
                self._gout_sums, self._gout_rows = [], []
        if self.check.exact:
            self.gout_col.add(stats.nonfinite_count(g), row, Key.GOUT_NF)
