"""The writer's worker: each step's packet into rows, diagnosis and summaries.

:class:`Worker` owns the analysis and its timing rules; :func:`drive`, the
one loop that feeds it, runs on the writer's thread here and in the child
process of :mod:`.worker_process`. What it needs of training is a :class:`Sink`.
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import threading
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

from ...format import blocks, metadata, summary
from .filewriter import GuardedFileWriter, SummaryFile
from ..step.rows import RowAssembler, histograms
from ..schedule import WatchConfig
from ..step.slots import StepPacket

if TYPE_CHECKING:
    from .. import distributed

__all__ = ["STOP", "Drain", "Counters", "Sink", "TrainingSink", "Worker", "drive", "sync_queue", "training_tag",
           "warn"]

log = logging.getLogger("tb_neuraldbg")


#: Packets gathered and then analysed back to back: between two steps,
#: training evicts the worker's data (the engine's state, numpy's buffers, its
#: code) from the caches, so a burst costs less CPU a step
#: (``benchmarks/overhead.py``). The rows and events are the same, at most
#: this many steps later (``on_error="raise"`` too).
BURST = 8
#: A gathered burst is analysed after this long without a new packet (a
#: paused or finished training loop): events are never held back for long.
BURST_WAIT_S = 0.5
#: A training loop that stopped without ``close()`` (a notebook whose loop
#: ended, an evaluation): after this long without a packet, a block open for
#: at least IDLE_BLOCK_AGE_S is closed and the file flushed, so that readers
#: get the block summaries of every row written (docs/FORMAT.md). The age
#: keeps a slow loop (a step every few seconds) from writing blocks of one row.
IDLE_CLOSE_S = 10.0
IDLE_BLOCK_AGE_S = 30.0

#: The item that ends :func:`drive`: everything is analysed and written.
STOP = object()


class Drain(threading.Event):
    """A sync marker that also drains (:meth:`Worker.write_held`): everything
    before it analysed and written, the ring's rows too, and the file
    flushed, before it is acknowledged (set). What a signal sends."""


def training_tag() -> str:
    """:func:`.distributed.tag` of the training process (imported here, not
    at the top: it imports torch, which a worker process's child does not)."""
    from .. import distributed

    return distributed.tag()


def warn(msg: str) -> None:
    """A warning of the worker's (shown once: through warnings, which
    ``logging.captureWarnings`` routes into a user's logs)."""
    warnings.warn(msg, RuntimeWarning)


class Counters(NamedTuple):
    """What ``DebugWriter.stats_info`` reports of a worker: ``cpu_s``, the
    CPU seconds of the ``cpu_steps`` steps after the first burst (which
    imports the diagnosis), spent within ``cpu_wall_s`` wall-clock seconds
    (from the end of the first burst to the end of the last)."""

    steps_analysed: int
    rows_written: int
    engine_running: bool
    cpu_s: float
    cpu_steps: int
    cpu_wall_s: float = 0.0


class Sink(Protocol):
    """What the worker needs of the training side: :class:`TrainingSink` in
    the training process; the worker process's child has its own, which
    sends each call back to it."""

    num_classes: int | None  # K of the cross-entropy loss, None while unknown

    def file_writer(self): ...  # the event file: add_summary(summary, global_step), flush()
    def batches_held(self) -> int: ...  # recent batches held (a burst stays shorter)
    def save_batch(self, event) -> str | None: ...  # the path of the batch behind event, saved
    def fail(self, diagnosis: dict, events: list) -> None: ...  # on_error="raise": at the next hook
    def config_json(self) -> dict: ...  # the run's stored config (neuraldbg/config)
    def tag(self) -> str: ...  # the prefix of the worker's messages


class TrainingSink:
    """The :class:`Sink` in the training process: ``writer``'s event file,
    the instrument's batches and hooks; ``failure``, the exception type that
    ``on_error="raise"`` raises in training (the writer's ``TrainingFailure``)."""

    tag = staticmethod(training_tag)

    def __init__(self, writer, instrument, config: WatchConfig, failure: Callable[[dict, list], BaseException]):
        self.writer = writer
        self.instrument = instrument
        self.config = config
        self.failure = failure

    @property
    def num_classes(self) -> int | None:
        return self.instrument.num_classes

    def file_writer(self):
        return self.writer._get_file_writer()

    def batches_held(self) -> int:
        return self.instrument.batches.held

    def save_batch(self, event) -> str | None:
        return self.instrument.batches.save_for(event, self.writer.log_dir)

    def fail(self, diagnosis: dict, events: list) -> None:
        self.instrument.fail_at_next_hook(self.failure(diagnosis, events))

    def config_json(self) -> dict:
        inst = self.instrument
        return self.config.to_json(optimizer=type(inst.optimizer).__name__ if inst.optimizer else None,
                                   scaler=inst.scaler is not None, num_classes=inst.num_classes,
                                   blocks=metadata.BLOCK_ROWS)


def drive(worker, get: Callable[..., object], acknowledge: Callable[[object], object], first: object = None) -> None:
    """The worker's loop, on the writer's thread and in the worker process.

    ``get(timeout=...)``: the next item, raising ``queue.Empty`` after
    ``timeout`` seconds without one (None: no limit), as
    ``queue.SimpleQueue.get`` does. An item is a :class:`StepPacket`,
    :data:`STOP` (all is written, the loop ends) or a sync marker (what came
    before it is analysed, then ``acknowledge(marker)``). ``first``: an item
    to begin with. ``worker``: a :class:`Worker`, or what stands in its
    place (the worker process's sender); its ``feed``, ``idle`` and
    ``analyse`` say how long to wait for the next item before ``idle``;
    a :class:`Drain` marker has ``write_held`` called instead of ``analyse``."""
    wait = None
    item = first
    while True:
        if item is None:
            try:
                item = get(timeout=wait)
            except queue.Empty:
                wait = worker.idle()
                continue
        if isinstance(item, StepPacket):
            wait = worker.feed(item)
        elif item is STOP:
            worker.finish()
            return
        else:
            wait = worker.write_held() if isinstance(item, Drain) else worker.analyse()
            acknowledge(item)
        item = None


def sync_queue(packets: queue.SimpleQueue, thread: threading.Thread | None, timeout: float | None,
               marker: threading.Event | None = None) -> bool:
    """Wait until ``thread`` has taken everything queued so far off
    ``packets`` and acknowledged it (at most ``timeout`` seconds); False if
    it did not get there. ``marker``: the Event put (a :class:`Drain` to
    drain; a new Event by default). Safe in a signal handler
    (``SimpleQueue.put`` is reentrant)."""
    if thread is None or not thread.is_alive() or threading.current_thread() is thread:
        return False
    done = marker if marker is not None else threading.Event()
    packets.put(done)
    return done.wait(timeout)


class Worker:
    """The background side: rows, diagnosis, summaries, file writes.

    Each packet becomes a ``[layers, metrics]`` row that the diagnosis sees
    at once. Rows pass through a ring of ``ring`` steps: one leaving it is
    written if it is on the write stride (:meth:`.schedule.WatchConfig.stride`)
    or within ``ring`` steps after an event, and an event writes the whole
    ring, so steps never go backwards and those around an event keep full
    resolution. Events (their batch saved, the file flushed), the diagnosis
    (on change) and the layer list (when it grows) are written at their
    step; every ``metadata.BLOCK_ROWS`` rows, and before each flush of its
    own, their block summary (:mod:`..format.blocks`). It never changes what
    is measured, so the rows do not depend on how far it lags.

    ``packets``: the queue :meth:`start`'s thread reads. ``ranks`` (a
    distributed run's :class:`.distributed.RankGather`) brings every rank's
    statistics to the rank(s) that write. Every failure is warned once and
    the worker carries on (a broken engine only stops the diagnosis).
    """

    def __init__(self, sink: Sink, config: WatchConfig, packets: queue.SimpleQueue | None = None,
                 ranks: "distributed.RankGather | None" = None):
        self.sink = sink
        self.config = config
        self.queue = packets
        self.ranks = ranks
        # A rank that does not write (``ranks`` on a rank other than 0).
        self.silent = ranks is not None and not ranks.writes
        # Summaries into the sink's event file (a rank that does not write: into none).
        null = GuardedFileWriter(None, "")
        self.file = SummaryFile((lambda: null) if self.silent else sink.file_writer)
        self.thread: threading.Thread | None = None
        self.layers: list[dict] = []
        self.engine = None
        self.engine_broken = False
        self.ring: collections.deque = collections.deque()  # (step, row, states, per-rank or None)
        self.last_written = -1
        self.last_event_step: int | None = None
        self.diagnosis: dict | None = None
        self.diagnosis_step = -1  # of the last diagnosis written
        self.last_events_step = -1
        self.steps_analysed = 0
        self.rows_written = 0
        self.cpu_s = 0.0
        self.cpu_steps = 0
        self.cpu_wall_s = 0.0
        self._cpu_from: float | None = None  # time.monotonic() at the end of the first burst
        self.warned: set[str] = set()
        self._pending: list[StepPacket] = []  # fed, not yet analysed
        self.rows = RowAssembler()
        self.blocks = blocks.BlockBuilder()
        self._block_opened = 0.0  # time.monotonic() of the open block's first row

    def tag(self) -> str:
        return self.sink.tag()

    # -- what drive() calls -----------------------------------------------

    # Each returns how long to wait for the next packet before idle() (None:
    # no limit): a gathered burst waits BURST_WAIT_S, an open block IDLE_CLOSE_S.

    def feed(self, packet: StepPacket) -> float | None:
        """Take a step's packet: gathered, and the burst analysed once full."""
        pending = self._pending
        pending.append(packet)
        if len(pending) < self._burst():
            return BURST_WAIT_S
        return self.analyse()

    def idle(self) -> float | None:
        """No packet for the time said: the gathered burst is analysed
        (training paused: an evaluation, the end), or else an open block
        that is old enough is closed and the file flushed."""
        if not self._pending:
            self._safe("block", self._close_idle_block)
        return self.analyse()

    def analyse(self) -> float | None:
        """Analyse every packet fed so far."""
        pending = self._pending
        if not pending:
            return IDLE_CLOSE_S if self.blocks.pending else None
        t0, counted = time.thread_time(), self.steps_analysed > 0
        # The burst's rows first, in one go (the same rows as one at a
        # time: where that fails, each packet assembles its own).
        ready = self._safe("burst", self.rows.burst, pending, len(self.layers)) if len(pending) > 1 else None
        for i, packet in enumerate(pending):
            self._safe("step", self._process, packet, *(ready[i] if ready else ()))
        if counted:
            self.cpu_s += time.thread_time() - t0
            self.cpu_steps += len(pending)
            self.cpu_wall_s = time.monotonic() - self._cpu_from
        else:
            self._cpu_from = time.monotonic()
        pending.clear()
        return IDLE_CLOSE_S if self.blocks.pending else None

    def write_held(self) -> float | None:
        """Analyse everything fed, write the rows held in the ring now (not
        at the end), close the open block and flush the file: what was
        recorded so far is on disk, and the worker goes on as before."""
        wait = self.analyse()
        self._safe("drain", self._drain)
        return wait

    def _drain(self) -> None:
        self._flush_ring()
        self._close_block()
        self.file.get().flush()

    def finish(self) -> None:
        """The end of the run: analyse what is left, write the ring, the
        last block and the end-of-run events, flush."""
        self.analyse()
        self._safe("finish", self._finish)

    def counters(self) -> Counters:
        return Counters(self.steps_analysed, self.rows_written, self.engine is not None and not self.engine_broken,
                        self.cpu_s, self.cpu_steps, self.cpu_wall_s)

    # -- the thread -------------------------------------------------------

    def start(self) -> None:
        """Start the daemon thread that drives this worker from ``packets``
        (once; the constructor starts nothing)."""
        if self.thread is None:
            self.thread = threading.Thread(target=drive, args=(self, self.queue.get, threading.Event.set),
                                           name="tb_neuraldbg-writer", daemon=True)
            self.thread.start()

    def sync(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far has been processed (at most
        ``timeout`` seconds); False if the worker did not get there."""
        return sync_queue(self.queue, self.thread, timeout)

    def drain(self, timeout: float | None = None) -> bool:
        """:meth:`sync`, and the rows held written and the file flushed
        (:class:`Drain`)."""
        return sync_queue(self.queue, self.thread, timeout, Drain())

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the worker after what is queued; False if it is still
        running after ``timeout`` seconds (it is a daemon: it cannot keep
        the interpreter alive)."""
        if self.thread is None:
            return True  # never started: nothing was processed, nothing to finish
        self.queue.put(STOP)
        if threading.current_thread() is self.thread:
            return False
        self.thread.join(timeout)
        if self.thread.is_alive():
            warn(f"{self.tag()}: the writer's worker did not finish within {timeout} s; the last steps may be missing")
            return False
        return True

    # -- analysis ---------------------------------------------------------

    def _burst(self) -> int:
        """:data:`BURST`; with ``save_batches``, fewer when few batches are
        held (large ones), so that an event's batch is still held when it is
        analysed."""
        if not self.config.save_batches:
            return BURST
        return max(1, min(BURST, self.sink.batches_held() - 2))

    def _safe(self, what: str, fn, *args):
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 -- the worker must not die
            self._warn_once(what, e)
            return None

    def _warn_once(self, what: str, e: BaseException) -> None:
        if what not in self.warned:
            self.warned.add(what)
            warn(f"{self.tag()}: writer {what} failed: {type(e).__name__}: {e}")

    # -- writing ----------------------------------------------------------

    def _write_row(self, step: int, row: np.ndarray, states: np.ndarray, per_rank=None) -> None:
        fw = self.file.get()  # (first: a new event file forgets the tags seen)
        if self.file.seen(summary.ROW_TAGS):
            fw.add_summary(summary.row_summary_without_metadata(row, states), global_step=step)
        else:
            self.file.add(summary.stats_summary(row, states), step)
        if per_rank is not None:  # (a distributed run: torch is there)
            from .. import distributed

            self.file.add(distributed.ranks_summary(per_rank), step)
        if self.config.is_layer_scalars(step):
            self._safe("layer scalars", self._write_layer_scalars, step, row)
        self.last_written = step
        self.rows_written += 1
        if not self.blocks.pending:
            self._block_opened = time.monotonic()
        self._write_block(self._safe("block", self.blocks.add, step, row, states))

    def _write_layer_scalars(self, step: int, row: np.ndarray) -> None:
        """``watch(layer_scalars_every=...)``: the written row's gradient
        norms and update ratios as plain scalars, module rows only (the
        pseudo-layers' rows hold the loss, the learning rate and the batch
        size under ``value``, not these metrics). A non-finite value is
        skipped: in a row NaN means "not measured at this step" (an update
        ratio between update steps, a module without parameters) as well as
        a non-finite gradient, which the neuraldbg tab and its events show
        (tests/test_layer_scalars.py)."""
        scalars = []
        for metric in metadata.LAYER_SCALAR_METRICS:
            column = row[:, metadata.METRIC_INDEX[metric]]
            for i, layer in enumerate(self.layers[:len(column)]):
                name = layer.get("name")
                if name in metadata.PSEUDO_LAYERS or not np.isfinite(column[i]):
                    continue
                scalars.append((metadata.layer_scalar_tag(metric, name), column[i]))
        if scalars:
            self.file.get().add_summary(summary.scalars_summary(scalars), global_step=step)

    def _close_idle_block(self) -> None:
        if time.monotonic() - self._block_opened >= IDLE_BLOCK_AGE_S:
            self._close_block()
            self.file.get().flush()

    def _close_block(self, final: bool = False) -> None:
        """Write the block of the rows written since the last one: before a
        flush of the worker's own, so that what it flushes is covered; at
        the end ``final`` (readers then know no row of this writer follows)."""
        self._write_block(self._safe("block", self.blocks.close, final))

    def _write_block(self, block: "blocks.Block | None") -> None:
        # A failed block costs only itself: the rows are written, and its
        # successor's span shows readers the gap (they read the rows then).
        if block is not None:
            self._safe("block", self._add_block, block)

    def _add_block(self, block: "blocks.Block") -> None:
        self.file.get()  # (first: a new event file forgets the tags seen)
        self.file.add(summary.block_summary(block.span, block.values, block.states,
                                            with_metadata=not self.file.seen(summary.BLOCK_TAGS)), block.step)

    def _flush_ring(self) -> None:
        for step, row, states, per_rank in self.ring:
            self._write_row(step, row, states, per_rank)
        self.ring.clear()

    def _drain_ring(self, now: int) -> None:
        K = self.config.ring
        while self.ring and self.ring[0][0] <= now - K:
            step, row, states, per_rank = self.ring.popleft()
            near_event = self.last_event_step is not None and 0 < step - self.last_event_step <= K
            if self.config.is_written(step) or near_event:
                self._write_row(step, row, states, per_rank)

    # -- per step ---------------------------------------------------------

    def _grow_layers(self, layers: list, step: int) -> None:
        if len(layers) <= len(self.layers):
            return
        new = [dict(l) for l in layers[len(self.layers):]]
        first = not self.layers
        self.layers.extend(new)
        if first:
            self.file.add(summary.config_summary(self.sink.config_json()), step)
        self.file.add(summary.layers_summary(self.layers), step)
        if self.engine_broken or self.silent:
            return
        try:
            if self.engine is None:
                # Looked up now, through the package attribute: the diagnosis
                # loads only with a first row, and tests swap the Engine there.
                from ...diagnosis import Engine

                self.engine = Engine(self.layers, thresholds=self.config.thresholds)
                self.engine.grad_clip = self.config.grad_clip  # (the advice knows what the loop clips)
            else:
                self.engine.add_layers(new)
        except Exception as e:  # noqa: BLE001
            self.engine_broken = True
            self._warn_once("diagnosis", e)

    def _process(self, packet: StepPacket, values: np.ndarray | None = None,
                 assembled: np.ndarray | None = None) -> None:
        step = packet.step
        if values is None:
            values = packet.host_values()
        self._grow_layers(packet.layers, step)
        L = len(self.layers)
        if assembled is not None and assembled.shape[0] != L:
            assembled = None  # (the layer list grew otherwise than foreseen)
        row = self.rows.row(packet, values, L, assembled)
        per_rank, seen = None, row  # seen: what the diagnosis gets
        if self.ranks is not None:
            # Every rank, every step, in step order: the collective pairs up.
            per_rank = self.ranks.gather(step, row)
            if self.silent:
                self.steps_analysed += 1
                return
            if per_rank is not None:
                loss = next((i for i, la in enumerate(self.layers) if la.get("name") == metadata.PSEUDO_LOSS), None)
                seen = self.ranks.merge(row, per_rank, loss)
                if self.ranks.everyone:
                    per_rank = None  # a run per rank stores its own rank's row
                else:
                    row = seen  # one run: the global batch, per-rank blocks beside it
        events = []
        states = np.full(L, metadata.STATE_UNKNOWN, dtype=np.uint8)
        if self.engine is not None and not self.engine_broken:
            try:
                k = packet.num_classes
                if k is not None and getattr(self.engine, "num_classes", k) is None:
                    self.engine.num_classes = k
                events = list(self.engine.update(step, seen))
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
            self.ring.append((step, row, states, per_rank))
            hists = histograms(packet, values, self.layers)
            if hists:
                self.file.get().add_summary(summary.histograms_summary(hists), global_step=step)
        if events:
            self._on_events(step, events)
        else:
            if self.diagnosis is not None and self.diagnosis["status"] == "failing":
                self._safe("diagnosis", self._follow_status, step)
            self._drain_ring(step)

    def _follow_status(self, step: int) -> None:
        """A standing warning can be resolved without an event of its own (a
        loss that started far from ln K has fallen since): the stored status
        follows at this step, so that what is on disk after any step (a
        drain, a run killed before close) is the diagnosis of the steps
        analysed, not of the last event (tests/test_status_timing.py)."""
        if self.engine is not None and not self.engine_broken and self.engine.status != self.diagnosis["status"]:
            self._write_diagnosis(step)

    def _on_events(self, step: int, events: list) -> None:
        # The ring first (steps stay in order), but a failure there must not
        # cost the events: they are written and flushed whatever happens.
        self._safe("ring", self._flush_ring)
        self.ring.clear()
        self._close_block()
        self.last_event_step = step
        dicts = []
        for e in events:
            d = e.to_dict()
            self._name_rank(d)
            # Rank 0 holds its own batches only: another rank's is not saved.
            theirs = self.ranks is not None and self.ranks.rank not in d.get("ranks", [d.get("rank", self.ranks.rank)])
            saved = self.config.save_batches and not theirs
            path = self._safe("batch save", self.sink.save_batch, e) if saved else None
            if path:
                d["batch_file"] = os.path.basename(path)
            dicts.append(d)
            if d.get("severity") == "error":
                log.warning("%s: step %s, %s: %s", self.tag(), d.get("step"), d.get("layer"), d.get("message"))
        self.file.add(summary.events_summary(dicts), step)
        self.last_events_step = step
        self._write_diagnosis(step)
        # Flush first: a run that stops here (on_error="raise", a crash) has
        # its events on disk.
        self.file.get().flush()
        if self.config.on_error == "raise" and self.diagnosis is not None and any(
                d.get("severity") == "error" for d in dicts):
            self.sink.fail(dict(self.diagnosis), dicts)

    def _write_diagnosis(self, step: int) -> None:
        if self.engine is None:
            return
        rc = self.engine.root_cause
        rc = dict(rc) if rc else None
        if self.ranks is not None:
            rc = self.ranks.root_cause(rc)
        diag = {"status": self.engine.status, "root_cause": rc}
        if diag != self.diagnosis:
            self.diagnosis = diag
            # (a step that went backwards: the tag's steps still do not)
            self.diagnosis_step = step = max(step, self.diagnosis_step)
            self.file.add(summary.diagnosis_summary(diag["status"], diag["root_cause"]), step)

    def _finish(self) -> None:
        last = self.ring[-1][0] if self.ring else self.last_written
        # The end of a run is what a user looks at after a crash: write it all.
        self._flush_ring()
        self._close_block(final=True)
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
                dicts = [e.to_dict() for e in events]
                for d in dicts:
                    self._name_rank(d)
                self.file.add(summary.events_summary(dicts), at)
                self.last_events_step = last = at
            self._write_diagnosis(last)
        self.file.get().flush()

    def _name_rank(self, d: dict) -> None:
        """The rank an event comes from, in a distributed run (see .distributed)."""
        if self.ranks is not None:
            self.ranks.name_ranks([d], [layer["name"] for layer in self.layers])
