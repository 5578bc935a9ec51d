"""DebugWriter: a torch SummaryWriter that also records per-layer statistics.

The training thread only runs hooks (see :mod:`.instrument`) and enqueues one
packet per step. A background worker thread turns each packet into a
``[layers, metrics]`` row (numpy), feeds the diagnosis engine every step,
and writes summaries into the writer's own event file:

* rows go through a ring of the last ``ring`` steps; a row is written when it
  leaves the ring if it is on the write stride (see
  :meth:`.instrument.WatchConfig.stride`) or within ``ring`` steps after an
  event, and the whole ring is written, in order, when an event occurs. So a
  tag's steps never go backwards and the steps around every event keep full
  resolution;
* events, the diagnosis (on change) and the layer list (when it grows) are
  written at the step they happen, and the file is flushed right after an
  event;
* summary metadata is written only the first time a tag is written to an
  event file (TensorBoard keeps the first-seen metadata).
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import logging
import math
import os
import queue
import threading
import warnings
import weakref
from typing import Any

import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import histogram_raw

from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

from .._version import __version__
from ..format import metadata, summary
from . import stats as S
from .instrument import Instrument, StepPacket, WatchConfig
from .stats import Key

__all__ = ["DebugWriter", "WatchHandle", "TrainingFailure"]

log = logging.getLogger("tb_neuraldbg")

# Models watched by any DebugWriter: watching twice is a no-op, and nothing
# is set on the user's module.
_WATCHED: "weakref.WeakKeyDictionary[torch.nn.Module, WatchHandle]" = weakref.WeakKeyDictionary()
_LIVE_WRITERS: "weakref.WeakSet[DebugWriter]" = weakref.WeakSet()
_BATCH_BYTES = 64 * 2**20
_MAX_BATCH_FILES = 8  # a run with many anomalies must not fill the disk
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


_ROW_TAGS = frozenset([metadata.stats_tag(m) for m in metadata.METRICS] + [metadata.TAG_STATES])
_STATS_TAGS = [metadata.stats_tag(m) for m in metadata.METRICS]


def row_summary_without_metadata(row: np.ndarray, states: np.ndarray) -> summary_pb2.Summary:
    """``summary.stats_summary(row, states)`` without any metadata: what a
    row is once its tags have been written to the file. Built from raw bytes
    (the same TensorProto that ``make_tensor_proto`` gives for these dtypes):
    the worker writes a row per step, and this is 5x faster."""
    row = np.asarray(row, dtype=np.float32)
    shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=row.shape[0])])
    cols = np.ascontiguousarray(row.T)
    values = [
        summary_pb2.Summary.Value(
            tag=tag,
            tensor=tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=shape, tensor_content=cols[j].tobytes()),
        )
        for j, tag in enumerate(_STATS_TAGS)
    ]
    values.append(
        summary_pb2.Summary.Value(
            tag=metadata.TAG_STATES,
            tensor=tensor_pb2.TensorProto(
                dtype=types_pb2.DT_UINT8,
                tensor_shape=shape,
                tensor_content=np.asarray(states, dtype=np.uint8).tobytes(),
            ),
        )
    )
    return summary_pb2.Summary(value=values)


def _jsonable(x):
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(x).items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, type):
        return x.__name__
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return str(x)


class _Worker:
    """The background side: rows, diagnosis, summaries, file writes.

    Runs on its own daemon thread; every failure is warned once and the
    worker carries on (a broken engine only stops the diagnosis).
    """

    _STOP = object()

    def __init__(self, writer: "DebugWriter", instrument: Instrument, config: WatchConfig):
        self.writer = writer
        self.instrument = instrument
        self.config = config
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.layers: list[dict] = []
        self.engine = None
        self.engine_broken = False
        self.ring: collections.deque = collections.deque()  # (step, row, states)
        self.last_written = -1
        self.last_event_step: int | None = None
        self.diagnosis: dict | None = None
        self.saved_nonfinite_batch = False
        self.saved_batches = 0
        self.last_events_step = -1
        self.steps_analysed = 0
        self.rows_written = 0
        self.warned: set[str] = set()
        self._seen_fw = None
        self._seen_tags: set[str] = set()
        self.thread = threading.Thread(target=self._run, name="tb_neuraldbg-writer", daemon=True)
        self.thread.start()

    # -- thread plumbing --------------------------------------------------

    def put(self, packet: StepPacket) -> None:
        self.queue.put(packet)

    def sync(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far has been processed (at most
        ``timeout`` seconds); False if the worker did not get there."""
        if not self.thread.is_alive() or threading.current_thread() is self.thread:
            return False
        done = threading.Event()
        self.queue.put(done)
        return done.wait(timeout)

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the worker after what is queued; False if it is still
        running after ``timeout`` seconds (it is a daemon: it cannot keep
        the interpreter alive)."""
        self.queue.put(self._STOP)
        if threading.current_thread() is self.thread:
            return False
        self.thread.join(timeout)
        if self.thread.is_alive():
            msg = f"tb_neuraldbg: the writer's worker did not finish within {timeout} s; the last steps may be missing"
            warnings.warn(msg, RuntimeWarning)
            log.warning(msg)
            return False
        return True

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is self._STOP:
                self._safe("finish", self._finish)
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            self._safe("step", self._process, item)

    def _safe(self, what: str, fn, *args):
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 -- the worker must not die
            self._warn_once(what, e)
            return None

    def _warn_once(self, what: str, e: BaseException) -> None:
        if what not in self.warned:
            self.warned.add(what)
            msg = f"tb_neuraldbg: writer {what} failed: {type(e).__name__}: {e}"
            warnings.warn(msg, RuntimeWarning)
            log.warning(msg)

    # -- writing ----------------------------------------------------------

    def _file_writer(self):
        fw = self.writer._get_file_writer()
        if fw is not self._seen_fw:  # a new event file: metadata again
            self._seen_fw = fw
            self._seen_tags = set()
        return fw

    def _add(self, summ, step: int) -> None:
        fw = self._file_writer()
        for v in summ.value:
            if v.tag in self._seen_tags:
                v.ClearField("metadata")
            else:
                self._seen_tags.add(v.tag)
        fw.add_summary(summ, global_step=step)

    def _write_row(self, step: int, row: np.ndarray, states: np.ndarray) -> None:
        if self._seen_fw is not None and self._seen_tags.issuperset(_ROW_TAGS):
            self._file_writer().add_summary(row_summary_without_metadata(row, states), global_step=step)
        else:
            self._add(summary.stats_summary(row, states), step)
        self.last_written = step
        self.rows_written += 1

    def _flush_ring(self) -> None:
        for step, row, states in self.ring:
            self._write_row(step, row, states)
        self.ring.clear()

    def _drain_ring(self, now: int) -> None:
        K = self.config.ring
        while self.ring and self.ring[0][0] <= now - K:
            step, row, states = self.ring.popleft()
            near_event = self.last_event_step is not None and 0 < step - self.last_event_step <= K
            if self.config.is_written(step) or near_event:
                self._write_row(step, row, states)

    # -- per step ---------------------------------------------------------

    def _grow_layers(self, layers: list, step: int) -> None:
        if len(layers) <= len(self.layers):
            return
        new = [dict(l) for l in layers[len(self.layers):]]
        first = not self.layers
        self.layers.extend(new)
        if first:
            self._add(summary.config_summary(self._config_json()), step)
        self._add(summary.layers_summary(self.layers), step)
        if self.engine_broken:
            return
        try:
            if self.engine is None:
                from ..diagnosis import Engine

                self.engine = Engine(self.layers, thresholds=self.config.thresholds)
            else:
                self.engine.add_layers(new)
        except Exception as e:  # noqa: BLE001
            self.engine_broken = True
            self._warn_once("diagnosis", e)

    def _config_json(self) -> dict:
        c = self.config
        return {
            "format_version": metadata.FORMAT_VERSION,
            "tb_neuraldbg": __version__,
            "torch": torch.__version__,
            "stats_every": c.stats_every,
            "update_every": c.update_every,
            "hist_every": c.hist_every,
            "full_steps": c.full_steps,
            "ring": c.ring,
            "max_layers": c.max_layers,
            "include": _jsonable(c.include),
            "exclude": _jsonable(c.exclude),
            "start_step": c.start_step,
            "optimizer": type(self.instrument.optimizer).__name__ if self.instrument.optimizer else None,
            "scaler": self.instrument.scaler is not None,
            "num_classes": self.instrument.num_classes,
            "thresholds": _jsonable(c.thresholds),
        }

    def _process(self, packet: StepPacket) -> None:
        step = packet.step
        values = packet.host_values()
        self._grow_layers(packet.layers, step)
        L = len(self.layers)
        row = S.assemble(values, packet.rows, packet.keys, L)
        if not self.instrument.exact_nonfinite:
            nf = row[:, [metadata.METRIC_INDEX[m] for m in ("act_nonfinite", "in_nonfinite", "grad_nonfinite", "gout_nonfinite")]]
            if np.nanmax(nf, initial=0) > 0:
                self.instrument.exact_nonfinite = True
        events = []
        states = np.full(L, metadata.STATE_UNKNOWN, dtype=np.uint8)
        if self.engine is not None and not self.engine_broken:
            try:
                k = self.instrument.num_classes
                if k is not None and getattr(self.engine, "num_classes", k) is None:
                    self.engine.num_classes = k
                events = list(self.engine.update(step, row))
                states = np.asarray(self.engine.states, dtype=np.uint8).copy()
            except Exception as e:  # noqa: BLE001
                self.engine_broken = True
                self._warn_once("diagnosis", e)
        self.steps_analysed += 1
        if step <= self.last_written or (self.ring and step <= self.ring[-1][0]):
            # A step that goes backwards (a restart without start_step): keep
            # the file monotonic per tag; the row was still analysed.
            self._warn_once("order", ValueError(f"step {step} is not after the last one; not written"))
        else:
            self.ring.append((step, row, states))
            self._write_histograms(packet, values, step)
        if events:
            self._on_events(step, events)
        else:
            self._drain_ring(step)

    def _write_histograms(self, packet: StepPacket, values: np.ndarray, step: int) -> None:
        m = packet.keys == Key.HIST
        if not m.any():
            return
        width = S.HIST_BINS + 5
        hv, hr = values[m], packet.rows[m]
        fw = self._file_writer()
        for i in range(0, len(hv), width):
            parts = S.histogram_parts(hv[i : i + width])
            if not parts.get("num"):
                continue
            name = self.layers[int(hr[i])]["name"]
            summ = histogram_raw(
                metadata.hist_tag(name),
                parts["min"],
                parts["max"],
                parts["num"],
                parts["sum"],
                parts["sum_squares"],
                parts["bucket_limits"],
                parts["bucket_counts"],
            )
            fw.add_summary(summ, global_step=step)

    def _on_events(self, step: int, events: list) -> None:
        self._flush_ring()
        self.last_event_step = step
        dicts = []
        for e in events:
            d = e.to_dict()
            path = self._safe("batch save", self._maybe_save_batch, e)
            if path:
                d["batch_file"] = os.path.basename(path)
            dicts.append(d)
            if d.get("severity") == "error":
                log.warning("tb_neuraldbg: step %s, %s: %s", d.get("step"), d.get("layer"), d.get("message"))
        self._add(summary.events_summary(dicts), step)
        self.last_events_step = step
        self._write_diagnosis(step)
        # Flush first: a run that stops here (on_error="raise", a crash) has
        # its events on disk.
        self.writer._get_file_writer().flush()
        if (
            self.config.on_error == "raise"
            and any(d.get("severity") == "error" for d in dicts)
            and self.diagnosis is not None
        ):
            self.instrument.pending_failure = TrainingFailure(dict(self.diagnosis), dicts)

    def _write_diagnosis(self, step: int) -> None:
        if self.engine is None:
            return
        rc = self.engine.root_cause
        diag = {"status": self.engine.status, "root_cause": dict(rc) if rc else None}
        if diag != self.diagnosis:
            self.diagnosis = diag
            self._add(summary.diagnosis_summary(diag["status"], diag["root_cause"]), step)

    def _maybe_save_batch(self, event) -> str | None:
        if not self.config.save_batches:
            return None
        if event.kind == "nonfinite":
            if self.saved_nonfinite_batch:
                return None
        elif event.kind != "data_anomaly":
            return None
        if self.saved_batches >= _MAX_BATCH_FILES:
            return None
        found = self.instrument.batch_for(int(event.step))
        if found is None:
            return None
        step, args, kwargs = found
        arrays: dict[str, np.ndarray] = {}
        budget = _BATCH_BYTES

        def put(name, t):
            nonlocal budget
            if not isinstance(t, torch.Tensor) or budget <= 0:
                return
            t = t.detach()
            if t.dtype == torch.bfloat16:  # numpy has no bfloat16
                t = t.float()
            per_row = t[0].numel() * t.element_size() if t.dim() > 0 and t.shape[0] else t.element_size()
            if t.dim() > 0 and t.numel() * t.element_size() > budget:
                t = t[: max(1, budget // max(per_row, 1))]
            a = t.cpu().numpy()
            arrays[name] = a
            budget -= a.nbytes

        for i, a in enumerate(args):
            put(f"arg{i}", a)
        for k, v in kwargs.items():
            put(str(k), v)
        if not arrays:
            return None
        path = os.path.join(self.writer.log_dir, f"neuraldbg_batch_step{step}.npz")
        np.savez(path, **arrays)
        self.saved_batches += 1
        if event.kind == "nonfinite":
            self.saved_nonfinite_batch = True
        return path

    def _finish(self) -> None:
        last = self.ring[-1][0] if self.ring else self.last_written
        # The end of a run is what a user looks at after a crash: write it all.
        self._flush_ring()
        if self.engine is not None and not self.engine_broken and last >= 0:
            try:
                events = list(self.engine.finish())
            except Exception as e:  # noqa: BLE001
                events = []
                self._warn_once("diagnosis", e)
            if events:
                # One events value per step: after events already written at
                # the last step, the end-of-run ones go one step later.
                at = max(last, self.last_events_step + 1)
                self._add(summary.events_summary([e.to_dict() for e in events]), at)
                self.last_events_step = last = at
            self._write_diagnosis(last)
        self.writer._get_file_writer().flush()


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
        self._worker: _Worker | None = None
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
        max_layers: int | None = 256,
        stats_every: int = 10,
        update_every: int = 100,
        hist_every: int = 100,
        full_steps: int = 2000,
        ring: int = 32,
        on_error: str = "warn",
        thresholds=None,
        start_step: int = 0,
        save_batches: bool = True,
    ) -> WatchHandle:
        """Watch ``model``; returns a handle whose ``remove()`` takes the hooks off.

        With ``optimizer`` each ``optimizer.step()`` records one step (each
        ``scaler.update()`` when a GradScaler ``scaler`` is given, so that a
        skipped step is recorded too); without, call :meth:`record` after
        backward. ``criterion`` (an ``nn.Module``) gives the ``<loss>`` row;
        without one, pass the loss with ``record(loss=...)``.

        Knobs: ``include``/``exclude`` (fnmatch name patterns or module
        types), ``max_layers`` (cap, evenly spaced), ``stats_every`` (full
        activation/weight statistics cadence; gradient norms and non-finite
        checks are every step), ``update_every`` (update ratios, each a copy
        of the weights), ``hist_every`` (activation histograms, 0 = off), ``full_steps``/``ring`` (write schedule, docs/FORMAT.md),
        ``on_error="raise"`` (raise :class:`TrainingFailure` in the training
        thread after an error-level event), ``thresholds`` (passed to the
        diagnosis Engine), ``start_step`` (step of the first record, e.g.
        when resuming), ``save_batches`` (save the offending batch as .npz on
        a data anomaly or the first non-finite event).

        Watching the same model twice returns the existing handle.
        """
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
        config = WatchConfig(
            include=include,
            exclude=exclude,
            max_layers=max_layers,
            stats_every=stats_every,
            update_every=update_every,
            hist_every=hist_every,
            full_steps=full_steps,
            ring=ring,
            on_error=on_error,
            thresholds=thresholds,
            start_step=start_step,
            save_batches=save_batches,
        )
        sink_box: list = []
        instrument = Instrument(
            model, lambda p: sink_box[0](p), config, optimizer=optimizer, criterion=criterion, scaler=scaler
        )
        worker = _Worker(self, instrument, config)
        sink_box.append(worker.put)
        self._worker = worker
        handle = WatchHandle(self, model, instrument)
        self._handle = handle
        _WATCHED[model] = handle
        return handle

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
            if not getattr(self, "_warned_record_removed", False):
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
        w = self._worker or getattr(self, "_last_worker", None)
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
