"""DebugWriter: a torch SummaryWriter that also records per-layer statistics.

The public face of the training side. ``DebugWriter.watch`` builds the
settings (:mod:`.schedule`), the hooks (:mod:`.instrument`) and the
background thread that analyses and writes each step (:mod:`.worker`),
joined by one queue; ``close()`` (also at interpreter exit, through the
registry of live writers here) takes the hooks off and writes what is left.
"""

from __future__ import annotations

import atexit
import queue
import warnings
import weakref
from typing import Any

import torch
from torch.utils.tensorboard import SummaryWriter

from .instrument import Instrument
from .schedule import WatchConfig, knobs_doc
from .worker import Worker

__all__ = ["DebugWriter", "WatchHandle", "TrainingFailure"]

# Models watched by any DebugWriter: watching twice is a no-op, and nothing
# is set on the user's module.
_WATCHED: "weakref.WeakKeyDictionary[torch.nn.Module, WatchHandle]" = weakref.WeakKeyDictionary()
_LIVE_WRITERS: "weakref.WeakSet[DebugWriter]" = weakref.WeakSet()
# Longest wait for the worker in remove()/close() (and so at interpreter
# exit): a hung worker (a stuck file system) is abandoned, not waited for.
_CLOSE_TIMEOUT = 60.0


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

    @property
    def layers(self) -> list[dict]:
        """Rows so far: {"name", "type"} in row order."""
        return list(self.instrument.layers)

    def remove(self) -> None:
        """Remove every hook. Safe to call twice; the writer stays open."""
        self.instrument.remove()
        writer = self._writer()
        if writer is not None and writer._worker is not None:
            # Steps in flight may still need a batch; a hung worker must not
            # hang training (or interpreter exit): the wait is bounded.
            writer._worker.sync(_CLOSE_TIMEOUT)
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
    """

    def __init__(self, log_dir: str | None = None, *args, **kwargs):
        super().__init__(log_dir, *args, **kwargs)
        self._handle: WatchHandle | None = None
        self._worker: Worker | None = None
        self._last_worker: Worker | None = None  # after close(), for stats_info
        self._warned_record_removed = False
        self._closed = False
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
        start_step: int = 0,
        save_batches: bool = True,
        nonfinite: str = "replay",
    ) -> WatchHandle:
        """Watch ``model``; returns a handle whose ``remove()`` takes the hooks off.

        With ``optimizer`` each ``optimizer.step()`` records one step (each
        ``scaler.update()`` when a GradScaler ``scaler`` is given, so that a
        skipped step is recorded too); without, call :meth:`record` after
        backward. ``criterion`` (an ``nn.Module``) gives the ``<loss>`` row;
        without one, pass the loss with ``record(loss=...)``.

        Watching the same model twice returns the existing handle.

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
            raise ValueError("this model is already watched by another DebugWriter; remove() that first")
        if self._handle is not None:
            # One run per event file: a second model (or a second watch of the
            # same one) would restart steps and change the row list mid-file.
            raise ValueError(
                "this DebugWriter already watched a model; use a new DebugWriter "
                "(another run directory) to watch again"
            )
        config = WatchConfig.from_arguments(knobs)
        # Built in order, joined by the queue: the hooks put, the worker gets.
        packets: queue.SimpleQueue = queue.SimpleQueue()
        instrument = Instrument(model, packets.put, config, optimizer=optimizer, criterion=criterion, scaler=scaler)
        worker = Worker(self, instrument, config, packets, failure=TrainingFailure)
        worker.start()
        self._worker = worker
        handle = WatchHandle(self, model, instrument)
        self._handle = handle
        _WATCHED[model] = handle
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
        still in the ring (the last ``ring`` steps) are written at close()."""
        if self._worker is not None:
            self._worker.sync(_CLOSE_TIMEOUT)
        super().flush()

    def close(self) -> None:
        """Remove the hooks, write what is left, close the event file."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._handle is not None:
                self._handle.remove()
            self._stop_worker()
        finally:
            super().close()
            _LIVE_WRITERS.discard(self)

    # -- internals --------------------------------------------------------

    def _stop_worker(self) -> None:
        if self._worker is not None:
            self._worker.stop(_CLOSE_TIMEOUT)
            self._last_worker = self._worker
            self._worker = None

    @property
    def stats_info(self) -> dict:
        """Counters of the current (or last) worker: steps analysed, rows
        written, and whether the diagnosis engine is running."""
        w = self._worker or self._last_worker
        if w is None:
            return {}
        return {
            "steps_analysed": w.steps_analysed,
            "rows_written": w.rows_written,
            "engine": w.engine is not None and not w.engine_broken,
        }


@atexit.register
def _close_all_at_exit() -> None:
    # Flush what the worker holds when the interpreter exits (also after an
    # uncaught exception in the training loop).
    for w in list(_LIVE_WRITERS):
        try:
            w.close()
        except Exception:  # noqa: BLE001
            pass
