"""DebugWriter: a torch SummaryWriter that also records per-layer statistics.

The public face of the training side. ``DebugWriter.watch`` builds the
settings (:mod:`.schedule`), the hooks (:mod:`.instrument`) and the
background thread that analyses and writes each step (:mod:`.worker`),
joined by one queue; ``close()`` (also at interpreter exit, through the
registry of live writers here, and on SIGTERM: :mod:`.run.signals`) takes the
hooks off and writes what is left.
"""

from __future__ import annotations

import atexit
import gc
import inspect
import operator
import queue
import sys
import time
import warnings
import weakref
from typing import Any

import torch
from torch.utils.tensorboard import SummaryWriter

from ..format import crc
from .run import costs, preconditions, signals
from . import distributed
from .worker.filewriter import GuardedFileWriter
from .hooks.instrument import Instrument
from .modules import loss_modules, select_added, unwrap
from .optimizer_wrappers import unwrap_optimizer
from .run.lock import RunLock
from .run.session import Session
from .schedule import WatchConfig, knobs_doc
from .worker.thread import TrainingSink, Worker

__all__ = ["DebugWriter", "WatchHandle", "TrainingFailure", "unwatch"]


# Models watched by any DebugWriter: watching twice is a no-op, and nothing
# is set on the user's module.
_WATCHED: "weakref.WeakKeyDictionary[torch.nn.Module, WatchHandle]" = weakref.WeakKeyDictionary()
_LIVE_WRITERS: "weakref.WeakSet[DebugWriter]" = weakref.WeakSet()
# Longest wait for the worker in remove()/close() (and so at interpreter
# exit): a hung worker (a stuck file system) is abandoned, not waited for.
_CLOSE_TIMEOUT = 60.0
# DebugWriter(drain_timeout=...)'s default: how long a signal waits for the
# writer's last steps (a scheduler's grace period is tens of seconds;
# Kubernetes' default is 30).
DRAIN_TIMEOUT = 5.0


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


class TrainingFailure(RuntimeError):
    """Raised in the training thread (``watch(..., on_error="raise")``) at the
    next hook after the diagnosis found an error-level event.

    ``diagnosis``: {"status", "root_cause"}; ``events``: the event dicts.
    """

    def __init__(self, diagnosis: dict, events: list):
        self.diagnosis = diagnosis
        self.events = events
        rc = diagnosis.get("root_cause") or {}
        where = f" at step {rc.get('step')} in {rc.get('layer')}" if rc else ""
        msg = rc.get("message") or (events[0]["message"] if events else "training failed")
        super().__init__(f"tb_neuraldbg: training is failing{where}: {msg}")


class WatchHandle:
    """What ``DebugWriter.watch`` returns: ``remove()`` takes every hook off."""

    def __init__(self, writer: "DebugWriter", model, instrument: Instrument):
        self._writer = weakref.ref(writer)
        self._model = weakref.ref(model)
        self.instrument = instrument
        self._added_hook = None  # see watch_added_modules
        self._names: "weakref.WeakKeyDictionary[torch.nn.Module, str]" = weakref.WeakKeyDictionary()
        self.added: list[str] = []  # modules watched after watch(), by name

    def watch_added_modules(self) -> None:
        """From now on, a module added to the model (``model.head = ...``)
        is said once and watched (a global registration hook that looks only
        at this model's modules)."""
        root = unwrap(self._model())
        for name, m in root.named_modules():
            self._names.setdefault(m, name)
        handle = weakref.ref(self)

        def on_register(parent, name, sub):
            h = handle()
            if h is not None and parent in h._names and isinstance(sub, torch.nn.Module):
                try:
                    h._on_added(parent, name, sub)
                except Exception as e:  # noqa: BLE001 -- never break model building
                    warnings.warn(f"{distributed.tag()}: cannot watch the added module {name!r}: {e}", RuntimeWarning)
            return None

        self._added_hook = torch.nn.modules.module.register_module_module_registration_hook(on_register)

    def _on_added(self, parent, name: str, sub) -> None:
        inst = self.instrument
        if inst.removed or sub in self._names:
            return
        prefix = self._names[parent]
        full = f"{prefix}.{name}" if prefix else name
        for n, m in sub.named_modules():
            self._names.setdefault(m, f"{full}.{n}" if n else full)
        found = select_added(full, sub, inst.config.include, inst.config.exclude)
        if not found:
            return
        inst.add_modules(found)
        self.added.extend(n for n, _ in found)
        msg = (
            f"{distributed.tag()}: module {full!r} was added to the model after watch(); it is "
            "watched from its first call (its row is appended)"
        )
        warnings.warn(msg, RuntimeWarning, stacklevel=4)

    @property
    def layers(self) -> list[dict]:
        """Rows so far: {"name", "type"} in row order."""
        return list(self.instrument.layers)

    def remove(self) -> None:
        """Remove every hook. Safe to call twice; the writer stays open."""
        self._remove(_CLOSE_TIMEOUT)

    def _remove(self, timeout: float) -> None:
        # (before the hooks come off and the worker is synced below: the step it records, at
        # the run's end, is written like any other's)
        never = self.instrument.commit_never_stepped()
        if never:
            warnings.warn(
                f"tb_neuraldbg: the watched optimizer never stepped during {never} backward pass(es): no step "
                "was recorded but the one in progress, now, which says so (a step is recorded at each "
                "optimizer.step(); was scheduler.step() called in its place, or step() on another "
                "optimizer?)", RuntimeWarning, stacklevel=3)
        if self._added_hook is not None:
            self._added_hook.remove()
            self._added_hook = None
        self.instrument.remove()
        writer = self._writer()
        if writer is not None and writer._worker is not None:
            # Steps in flight may still need a batch; a hung worker must not
            # hang training (or interpreter exit): the wait is bounded.
            writer._worker.sync(timeout)
        self.instrument.release()
        model = self._model()
        if model is not None and _WATCHED.get(model) is self:
            del _WATCHED[model]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False



class DebugWriter(SummaryWriter):
    """A ``torch.utils.tensorboard.SummaryWriter`` that can watch a model.

    Everything a SummaryWriter does still works, into the same event file.
    ``watch()`` adds per-layer statistics, online diagnosis and activation
    histograms; ``close()`` (also at interpreter exit and on leaving a
    ``with`` block, exception or not) removes the hooks and writes what is
    left.

    In a distributed run (an initialised process group of 2 ranks or more,
    every rank making its own DebugWriter), ``ranks`` says who writes:
    ``"gather"`` (default): rank 0 writes one run holding every rank's
    statistics, other ranks write nothing into ``log_dir`` (SummaryWriter
    calls of theirs go to ``<log_dir>/rank<r>``); ``"each"``: every rank
    writes its own run ``<log_dir>/rank<r>`` (see :mod:`.distributed`).

    ``purge_step`` (SummaryWriter's, for a run resumed from a checkpoint):
    ``watch()`` counts steps from it, and what earlier writers of the run
    wrote from that step on is hidden (by TensorBoard, ``neuraldbg report``
    and the tab). While it watches, SIGTERM and SIGINT first write the steps
    it holds, within ``drain_timeout`` seconds, then do what they would have
    done (:mod:`.run.signals`; ``handle_signals=False``: left alone). A second
    live DebugWriter in the same run directory is warned (:mod:`.run.lock`).
    """

    def __init__(self, log_dir: str | None = None, *args, ranks: str = "gather",
                 drain_timeout: float = DRAIN_TIMEOUT, handle_signals: bool = True, **kwargs):
        if ranks not in distributed.MODES:
            raise ValueError(f"ranks must be one of {distributed.MODES}, got {ranks!r}")
        if isinstance(drain_timeout, bool) or not isinstance(drain_timeout, (int, float)) or not drain_timeout >= 0:
            raise ValueError(f"drain_timeout must be a number of seconds >= 0, got {drain_timeout!r}")
        problem = preconditions.log_dir_problem(log_dir)
        if problem:  # (raised here: one frame of ours in the user's traceback)
            raise ValueError(problem)
        self.ranks = ranks
        self.drain_timeout = float(drain_timeout)
        self.handle_signals = bool(handle_signals)
        # SummaryWriter forgets its purge_step once it wrote it (and would
        # write it again into a file it reopens): kept apart, for watch()'s
        # step count and the session's start record.
        bound = inspect.signature(SummaryWriter.__init__).bind_partial(None, log_dir, *args, **kwargs)
        purge = bound.arguments.get("purge_step")
        self._purge_from = None if purge is None else operator.index(purge)
        # TensorBoard's writer checksums each record in pure Python, holding
        # the GIL: C where installed.
        crc.use_fast_crc()
        w = distributed.world()
        # Born first: SummaryWriter.__init__ opens the event file through
        # _get_file_writer (a failure to open it then is raised: the user's
        # path is wrong before training starts).
        self._guarded: GuardedFileWriter | None = None
        self._opening = True
        # A rank other than 0 of a "gather" run opens its own file only when
        # the user writes something (two writers of one run directory would
        # mix and lose each other's data in TensorBoard).
        self._defer_open = False
        if w is not None and log_dir:
            if ranks == "each" or w[0] != 0:
                log_dir = distributed.rank_dir(log_dir, w[0])
            self._defer_open = ranks == "gather" and w[0] != 0
        super().__init__(log_dir, *args, **kwargs)
        self._opening = False
        self._handle: WatchHandle | None = None
        self._worker: Worker | None = None
        self._last_worker: Worker | None = None  # after close(), for stats_info
        self._warned_record_removed = False
        self._closed = False
        self._session: Session | None = None  # once watching (docs/FORMAT.md, Sessions)
        self._lock = RunLock(str(self.log_dir))
        if not self._defer_open:
            self._lock.acquire(distributed.tag())
        _LIVE_WRITERS.add(self)

    # -- public API -------------------------------------------------------

    def watch(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        criterion: Any = None,
        scaler: Any = None,
        *,
        include=None,
        exclude=None,
        max_layers: int | None = None,
        stats_every: int = 10,
        update_every: int = 100,
        hist_every: int = 100,
        full_steps: int = 2000,
        ring: int = 32,
        on_error: str = "warn",
        thresholds=None,
        start_step: int | None = None,
        save_batches: bool = True,
        nonfinite: str = "replay",
        analysis: str = "thread",
        layer_scalars_every: int = 0,
        grad_clip: float | None = None,
    ) -> WatchHandle:
        """Watch ``model``; returns a handle whose ``remove()`` takes the hooks off.

        With ``optimizer`` each ``optimizer.step()`` records one step (each
        ``scaler.update()`` when a GradScaler ``scaler`` is given, so that a
        skipped step is recorded too); without, call :meth:`record` after
        backward. ``criterion`` (an ``nn.Module``) gives the ``<loss>`` row;
        without one, pass the loss with ``record(loss=...)``.

        Watching the same model twice returns the existing handle.
        ``start_step`` defaults to the writer's ``purge_step`` (a resumed
        run), else 0.

        The keyword arguments, which are the fields of
        :class:`.schedule.WatchConfig` (declared and documented there):
        """
        knobs = dict(locals())  # first: only the arguments
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"watch() needs an nn.Module, got {type(model).__name__}")
        if self._closed:
            raise RuntimeError("watch() on a closed DebugWriter")
        existing = _WATCHED.get(model)
        if existing is not None and not existing.instrument.removed:
            if existing._writer() is self:
                return existing
            _take_over(existing)
        if self._handle is not None:
            # One run per event file: a second model (or a second watch of the
            # same one) would restart steps and change the row list mid-file.
            raise ValueError(
                "this DebugWriter already watched a model; use a new DebugWriter "
                "(another run directory) to watch again"
            )
        if start_step is None:
            knobs["start_step"] = self._purge_from if self._purge_from is not None else 0
        config = WatchConfig.from_arguments(knobs)
        optimizer, scaler = unwrap_optimizer(optimizer, scaler)
        preconditions.check_optimizer(model, optimizer)
        if criterion is None:
            # A loss module kept in the model (self.crit = nn.CrossEntropyLoss())
            # is the criterion: the first one, when there are several.
            found = loss_modules(model)
            criterion = found[0] if found else None
        # Built in order, joined by the queue: the hooks put, the worker gets.
        # All or nothing: a failure half-way leaves no hook and no thread.
        packets: queue.SimpleQueue = queue.SimpleQueue()
        instrument = Instrument(model, packets.put, config, optimizer=optimizer, criterion=criterion, scaler=scaler)
        try:
            gather = None
            if distributed.world() is not None:
                instrument.backward.after_reduce = True
                # A collective: every rank's watch() makes the gloo group.
                gather = distributed.RankGather.create(everyone=self.ranks == "each")
            if distributed.has_dtensors(model.parameters()):
                instrument.norms = instrument.grad_norms = distributed.sharded_norms
            worker = self._new_worker(instrument, config, packets, gather)
            handle = WatchHandle(self, model, instrument)
            handle.watch_added_modules()
            try:
                worker.start()
            except OSError as e:  # (a child process that cannot start: the thread)
                _warn_thread(f"the worker process could not start ({type(e).__name__}: {e})")
                worker = Worker(worker.sink, config, packets, ranks=gather)
                worker.start()
        except BaseException:
            instrument.remove()
            instrument.release()
            raise
        self._worker = worker
        self._handle = handle
        _WATCHED[model] = handle
        if not getattr(worker, "silent", False):  # (a rank that writes no run: no session)
            self._session = Session(config.start_step, self._purge_from)
            self._session.start(self._get_file_writer())
        if self.handle_signals:
            signals.register(self)
        return handle

    if watch.__doc__:  # None under python -OO
        watch.__doc__ = watch.__doc__.rstrip() + "\n\n" + knobs_doc(" " * 8) + "\n"

    def record(self, step: int | None = None, loss=None) -> None:
        """Record one step by hand, after backward (when no optimizer is
        watched). ``step`` defaults to the count of records so far (from
        ``start_step``). With an optimizer watched, only attaches ``loss``
        to the step the next ``optimizer.step()`` records."""
        if self._handle is None:
            raise RuntimeError("record() needs a watched model: call watch(model) first")
        if self._handle.instrument.removed:
            # After remove()/close() (maybe from another thread, a callback):
            # training goes on, unrecorded.
            if not self._warned_record_removed:
                self._warned_record_removed = True
                warnings.warn(
                    "tb_neuraldbg: record() after remove()/close() is ignored", RuntimeWarning, stacklevel=2
                )
            return
        self._handle.instrument.record(step, loss)

    def flush(self) -> None:
        """Process every recorded step, then flush the event file. Rows
        still in the ring (the last ``ring`` steps) are written at close().
        Never raises a file error (see :mod:`.filewriter`)."""
        if self._worker is not None:
            self._worker.sync(_CLOSE_TIMEOUT)
        self._flush_files()

    def close(self) -> None:
        """Remove the hooks, write what is left, close the event file.

        Never raises (also at the end of a ``with`` block): a logdir that
        was deleted, made read-only or filled up is warned, once."""
        self._close(_CLOSE_TIMEOUT)

    def _close(self, timeout: float) -> None:
        """close(), every wait within ``timeout`` seconds in all. The run is
        marked closed (its session's end record) only when the worker
        finished everything in time."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + timeout
        try:
            if self._handle is not None:
                self._quietly("close", self._handle._remove, _left(deadline))
            finished = self._stop_worker(_left(deadline))
            if finished and self._session is not None:
                self._quietly("close", self._session.end, self._get_file_writer(),
                              self._last_worker.sink.instrument.step)
        finally:
            for w in list((self.all_writers or {}).values()):
                self._quietly("close", w.flush)
                self._quietly("close", w.close)
            self.file_writer = self.all_writers = None
            _LIVE_WRITERS.discard(self)
            signals.unregister(self)
            self._lock.release()

    def _flush_files(self) -> None:
        for w in list((self.all_writers or {}).values()):
            self._quietly("flush", w.flush)

    def _on_signal(self, signum: int, timeout: float, close: bool) -> None:
        """SIGTERM or SIGINT (:mod:`.run.signals`): with ``close`` (the process
        ends next) close within ``timeout`` seconds; else drain: everything
        recorded so far analysed and written, the ring too, and flushed."""
        if self._closed:
            return
        if close:
            if self._session is not None:
                self._session.closed_by(signum)
            self._close(timeout)
            return
        if self._worker is not None:
            self._worker.drain(timeout)
        self._flush_files()

    # -- SummaryWriter's file, guarded ------------------------------------

    def _get_file_writer(self):
        """The event file writer, wrapped so that no write raises into
        training (SummaryWriter's own add_* go through here too)."""
        if self._opening and self._defer_open:
            return None  # SummaryWriter.__init__'s eager open: deferred
        guard = self._guarded
        if guard is not None and (guard.inner is None or guard.inner is self.file_writer):
            if guard.inner is None or self.all_writers is not None:
                return guard
        try:
            fw = super()._get_file_writer()
        except Exception as e:  # noqa: BLE001
            if self._opening:
                raise
            guard = self._guarded = GuardedFileWriter(None, str(self.log_dir), distributed.tag())
            guard.failed = False
            guard.fail("open", e)
            return guard
        self._guarded = GuardedFileWriter(fw, str(self.log_dir), distributed.tag())
        return self._guarded

    def _quietly(self, what: str, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 -- close()/flush() never raise
            self._note_failure(what, e)

    def _note_failure(self, what: str, e: BaseException) -> None:
        """A failure of close() or flush(), said once (see :mod:`.worker.filewriter`)."""
        guard = self._guarded or GuardedFileWriter(None, str(self.log_dir))
        self._guarded = guard
        if not guard.failed:
            guard.fail(what, e)

    # -- internals --------------------------------------------------------

    def _new_worker(self, instrument, config, packets, gather):
        """The thread's worker, or with ``analysis="process"`` the child's
        (not in a distributed run: its collectives are this process's)."""
        sink = TrainingSink(self, instrument, config, TrainingFailure)
        if config.analysis == "process":
            if gather is None:
                from .worker.process import ProcessWorker

                return ProcessWorker(sink, config, packets)
            _warn_thread("a distributed run gathers its ranks' rows on the worker's thread")
        return Worker(sink, config, packets, ranks=gather)

    def _stop_worker(self, timeout: float = _CLOSE_TIMEOUT) -> bool:
        """Stop the worker after what is queued; True when it finished
        within ``timeout`` seconds (or there was none). Never raises."""
        worker, self._worker = self._worker, None
        if worker is None:
            return True
        self._last_worker = worker
        try:
            return bool(worker.stop(timeout))
        except Exception as e:  # noqa: BLE001 -- close() never raises
            self._note_failure("close", e)
            return False

    @property
    def stats_info(self) -> dict:
        """What the writer costs a step, measured as it runs, and its
        worker's counters (:func:`.costs.stats_info` says each key)."""
        return costs.stats_info(self._worker or self._last_worker)


def _warn_thread(why: str) -> None:
    msg = f"{distributed.tag()}: watch(analysis='process'): {why}; the steps are analysed on the writer's thread"
    warnings.warn(msg, RuntimeWarning, stacklevel=4)


def _in_use(ref: "weakref.ref[DebugWriter]") -> bool:
    """True when something besides its own worker thread refers to the
    writer behind ``ref`` (a variable, a container, a running frame): it is
    in use, not lost. Counted, not searched: the locals of running frames
    are invisible to gc.get_referrers."""
    gc.collect()
    writer = ref()
    if writer is None:
        return False
    # Ours: this local, getrefcount's argument, and the worker's sink's attribute.
    own = 2 + (writer._worker is not None and writer._worker.sink.writer is writer)
    return sys.getrefcount(writer) > own


def _take_over(existing: WatchHandle) -> None:
    """Release a model watched by another writer, if that writer is lost
    (a notebook cell re-run: only its worker thread still holds it): that
    writer is closed, with a warning. Raises ValueError when it is in use."""
    if _in_use(existing._writer):
        raise ValueError(
            "this model is already watched by another DebugWriter; close() or remove() that "
            "first (or tb_neuraldbg.unwatch(model))"
        )
    old = existing._writer()
    where = f" (log_dir {old.log_dir})" if old is not None else ""
    del old
    msg = f"{distributed.tag()}: the model was watched by a DebugWriter no longer in use{where}; it is closed and the new one watches"
    warnings.warn(msg, RuntimeWarning, stacklevel=3)  # (the caller of watch())
    _release(existing)


def _release(handle: WatchHandle) -> None:
    writer = handle._writer()
    if writer is not None:
        writer.close()
    else:
        handle.remove()


def unwatch(model: torch.nn.Module) -> bool:
    """Release ``model`` from whichever DebugWriter watches it (one lost in a
    notebook, say): that writer is closed, its data written. True when the
    model was watched."""
    handle = _WATCHED.get(model)
    if handle is None or handle.instrument.removed:
        return False
    _release(handle)
    _WATCHED.pop(model, None)
    return True


@atexit.register
def _close_all_at_exit() -> None:
    # Flush what the worker holds when the interpreter exits (also after an
    # uncaught exception in the training loop). After a signal (a Ctrl-C's
    # KeyboardInterrupt: the writer was drained already) within each
    # writer's drain_timeout: the process is expected to end promptly.
    signalled = signals.delivered() is not None
    for w in list(_LIVE_WRITERS):
        try:
            w._close(w.drain_timeout if signalled else _CLOSE_TIMEOUT)
        except Exception:  # noqa: BLE001
            pass
