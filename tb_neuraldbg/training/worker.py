"""The writer's background thread: rows, diagnosis, summaries, file writes.

The training thread only runs hooks (see :mod:`.instrument`) and enqueues one
packet per step. The :class:`Worker` turns each packet into a
``[layers, metrics]`` row (numpy), feeds the diagnosis engine every step,
and writes summaries into the writer's own event file:

* rows go through a ring of the last ``ring`` steps; a row is written when it
  leaves the ring if it is on the write stride (see
  :meth:`.schedule.WatchConfig.stride`) or within ``ring`` steps after an
  event, and the whole ring is written, in order, when an event occurs. So a
  tag's steps never go backwards and the steps around every event keep full
  resolution;
* events, the diagnosis (on change) and the layer list (when it grows) are
  written at the step they happen, and the file is flushed right after an
  event; the batch behind an event is saved next to it (see :mod:`.batches`);
* every ``metadata.BLOCK_ROWS`` written rows, and before each flush of its
  own (an event, a loop idle for a while, the close), their block summary
  (:mod:`..format.blocks`): what a long run's full-range heatmap reads
  instead of every row;
* summary metadata is written only the first time a tag is written to an
  event file (TensorBoard keeps the first-seen metadata).

What it tells the training side goes through one method of the instrument,
``fail_at_next_hook()``: the worker never changes what is measured (that is
decided on the training thread from each step's own values), so the same
run gives the same rows however far the worker lags.
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import threading
import time
import warnings
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..format import blocks, metadata, summary
from .step import slots as S
from .filewriter import GuardedFileWriter
from .rows import RowAssembler
from .schedule import WatchConfig
from .step.slots import Key, StepPacket

if TYPE_CHECKING:
    from . import distributed
    from .hooks.instrument import Instrument

__all__ = ["Worker", "training_tag"]

log = logging.getLogger("tb_neuraldbg")


#: Packets gathered and then analysed back to back. Between two steps,
#: training streams its tensors through the caches and the worker's own data
#: (the engine's state, numpy's buffers, its code) falls out of them. The
#: writer's threads on the benchmark MLP: 1.62-1.65 ms of CPU a step with one
#: packet at a time, 0.84 ms with eight (ResNet 1.55 -> 0.94 ms; 16 gave no
#: more; 2026-12-03). The rows and events are the same; they reach the
#: event file, and ``on_error="raise"`` training, at most this many steps
#: later.
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


def training_tag() -> str:
    """:func:`.distributed.tag` of the training process (imported here, not
    at the top: it imports torch, which a worker process's child does not)."""
    from . import distributed

    return distributed.tag()


class Worker:
    """The background side: rows, diagnosis, summaries, file writes.

    ``packets``: the queue the instrument's sink puts each step into (built
    first, so that neither needs the other to exist: the instrument gets its
    ``put``, the worker reads it). ``writer``: the ``DebugWriter`` whose event
    file and run directory this writes to. ``failure``: the exception type
    raised in training after an error-level event with ``on_error="raise"``
    (the writer's ``TrainingFailure``: passed in so that this module does not
    import the writer). In a distributed run, ``ranks`` (a
    :class:`.distributed.RankGather`) brings every rank's statistics to rank
    0 (the only one that writes), or to every rank when each writes a run.

    The constructor starts nothing: :meth:`start` starts the daemon thread.
    Every failure is warned once and the worker carries on (a broken engine
    only stops the diagnosis).
    """

    _STOP = object()

    def __init__(
        self,
        writer,
        instrument: Instrument,
        config: WatchConfig,
        packets: queue.SimpleQueue,
        failure: Callable[[dict, list], BaseException],
        ranks: "distributed.RankGather | None" = None,
    ):
        self.writer = writer
        self.ranks = ranks
        # A rank that does not write (``ranks`` on a rank other than 0).
        self.silent = ranks is not None and not ranks.writes
        self._null = GuardedFileWriter(None, str(getattr(writer, "log_dir", "")))
        self.instrument = instrument
        self.config = config
        self.queue = packets
        self.failure = failure
        self.thread: threading.Thread | None = None
        self.layers: list[dict] = []
        self.engine = None
        self.engine_broken = False
        self.ring: collections.deque = collections.deque()  # (step, row, states, per-rank or None)
        self.last_written = -1
        self.last_event_step: int | None = None
        self.diagnosis: dict | None = None
        self.last_events_step = -1
        self.steps_analysed = 0
        self.rows_written = 0
        # The thread's CPU seconds over the steps analysed after its first
        # burst (which imports the diagnosis): DebugWriter.stats_info.
        self.cpu_s = 0.0
        self.cpu_steps = 0
        self.warned: set[str] = set()
        self._seen_fw = None
        self._seen_tags: set[str] = set()
        self.rows = RowAssembler()
        self.blocks = blocks.BlockBuilder()
        self._block_opened = 0.0  # time.monotonic() of the open block's first row

    def tag(self) -> str:
        """The prefix of the worker's messages (:func:`training_tag`; a
        worker process's child takes its parent's instead)."""
        return training_tag()

    @property
    def engine_running(self) -> bool:
        """The diagnosis engine exists and has not failed."""
        return self.engine is not None and not self.engine_broken

    # -- thread plumbing --------------------------------------------------

    def start(self) -> None:
        """Start the thread that processes the queued packets (once)."""
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="tb_neuraldbg-writer", daemon=True)
            self.thread.start()

    def sync(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far has been processed (at most
        ``timeout`` seconds); False if the worker did not get there."""
        if self.thread is None or not self.thread.is_alive() or threading.current_thread() is self.thread:
            return False
        done = threading.Event()
        self.queue.put(done)
        return done.wait(timeout)

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the worker after what is queued; False if it is still
        running after ``timeout`` seconds (it is a daemon: it cannot keep
        the interpreter alive)."""
        if self.thread is None:
            return True  # never started: nothing was processed, nothing to finish
        self.queue.put(self._STOP)
        if threading.current_thread() is self.thread:
            return False
        self.thread.join(timeout)
        if self.thread.is_alive():
            msg = f"{self.tag()}: the writer's worker did not finish within {timeout} s; the last steps may be missing"
            warnings.warn(msg, RuntimeWarning)
            log.warning(msg)
            return False
        return True

    def _run(self) -> None:
        pending: list[StepPacket] = []
        while True:
            if pending:
                try:
                    item = self.queue.get(timeout=BURST_WAIT_S)
                except queue.Empty:  # training paused (an evaluation, the end): analyse what came
                    self._process_all(pending)
                    continue
            else:
                try:
                    item = self.queue.get(timeout=IDLE_CLOSE_S if self.blocks.pending else None)
                except queue.Empty:  # no step for a while, a block open
                    self._safe("block", self._close_idle_block)
                    continue
            if isinstance(item, StepPacket):
                pending.append(item)
                if len(pending) < self._burst():
                    continue
            self._process_all(pending)  # (before a marker: everything queued before it)
            if item is self._STOP:
                self._safe("finish", self._finish)
                return
            if isinstance(item, threading.Event):
                item.set()

    def _burst(self) -> int:
        """How many packets to gather before analysing them back to back:
        :data:`BURST`; with ``save_batches``, fewer when the batch keeper
        holds few batches (large ones), so that an event's batch is still
        held when it is analysed."""
        if not self.config.save_batches:
            return BURST
        return max(1, min(BURST, self.instrument.batches.held - 2))

    def _process_all(self, pending: list) -> None:
        t0, counted = time.thread_time(), self.steps_analysed > 0
        # The burst's rows first, in one go (the same rows as one at a
        # time: where that fails, each packet assembles its own).
        ready = self._safe("burst", self._assemble, pending) if len(pending) > 1 else None
        for i, packet in enumerate(pending):
            self._safe("step", self._process, packet, *(ready[i] if ready else ()))
        if counted:
            self.cpu_s += time.thread_time() - t0
            self.cpu_steps += len(pending)
        pending.clear()

    def _assemble(self, packets: list) -> list:
        """(host values, assembled row) of each packet: the row count a
        packet gets is the layer list's length once it has grown to that
        packet's (see :meth:`_grow_layers`)."""
        values = [p.host_values() for p in packets]
        counts, n = [], len(self.layers)
        for p in packets:
            n = max(n, len(p.layers))
            counts.append(n)
        return list(zip(values, self.rows.assembled(packets, values, counts)))

    def _safe(self, what: str, fn, *args):
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 -- the worker must not die
            self._warn_once(what, e)
            return None

    def _warn_once(self, what: str, e: BaseException) -> None:
        if what not in self.warned:
            self.warned.add(what)
            msg = f"{self.tag()}: writer {what} failed: {type(e).__name__}: {e}"
            warnings.warn(msg, RuntimeWarning)
            log.warning(msg)

    # -- writing ----------------------------------------------------------

    def _file_writer(self):
        if self.silent:
            return self._null  # rank 0 writes the run
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

    def _write_row(self, step: int, row: np.ndarray, states: np.ndarray, per_rank=None) -> None:
        fw = self._file_writer()  # (first: a new event file forgets the tags seen)
        if self._seen_tags.issuperset(summary.ROW_TAGS):
            fw.add_summary(summary.row_summary_without_metadata(row, states), global_step=step)
        else:
            self._add(summary.stats_summary(row, states), step)
        if per_rank is not None:  # (a distributed run: torch is there)
            from . import distributed

            self._add(distributed.ranks_summary(per_rank), step)
        self.last_written = step
        self.rows_written += 1
        if not self.blocks.pending:
            self._block_opened = time.monotonic()
        self._write_block(self._safe("block", self.blocks.add, step, row, states))

    def _close_idle_block(self) -> None:
        if time.monotonic() - self._block_opened >= IDLE_BLOCK_AGE_S:
            self._close_block()
            self._file_writer().flush()

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
        self._file_writer()  # (first: a new event file forgets the tags seen)
        self._add(summary.block_summary(
            block.span, block.values, block.states,
            with_metadata=not self._seen_tags.issuperset(summary.BLOCK_TAGS)), block.step)

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
            self._add(summary.config_summary(self._config_json()), step)
        self._add(summary.layers_summary(self.layers), step)
        if self.engine_broken or self.silent:
            return
        try:
            if self.engine is None:
                # Looked up now, through the package attribute: the diagnosis
                # loads only with a first row, and tests swap the Engine there.
                from ..diagnosis import Engine

                self.engine = Engine(self.layers, thresholds=self.config.thresholds)
            else:
                self.engine.add_layers(new)
        except Exception as e:  # noqa: BLE001
            self.engine_broken = True
            self._warn_once("diagnosis", e)

    def _config_json(self) -> dict:
        inst = self.instrument
        return self.config.to_json(
            optimizer=type(inst.optimizer).__name__ if inst.optimizer else None,
            scaler=inst.scaler is not None,
            num_classes=inst.num_classes,
            blocks=metadata.BLOCK_ROWS,
        )

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
                seen = self.ranks.merge(row, per_rank, self._loss_row())
                if self.ranks.everyone:
                    per_rank = None  # a run per rank stores its own rank's row
                else:
                    row = seen  # one run: the global batch, per-rank blocks beside it
        events = []
        states = np.full(L, metadata.STATE_UNKNOWN, dtype=np.uint8)
        if self.engine is not None and not self.engine_broken:
            try:
                k = self.instrument.num_classes
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
        hists = []
        for i in range(0, len(hv), width):
            parts = S.histogram_parts(hv[i : i + width])
            if parts.get("num"):
                hists.append((metadata.hist_tag(self.layers[int(hr[i])]["name"]), parts))
        if hists:
            self._file_writer().add_summary(summary.histograms_summary(hists), global_step=step)

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
            path = None if theirs else self._safe("batch save", self._save_batch, e)
            if path:
                d["batch_file"] = os.path.basename(path)
            dicts.append(d)
            if d.get("severity") == "error":
                log.warning("%s: step %s, %s: %s", self.tag(), d.get("step"), d.get("layer"), d.get("message"))
        self._add(summary.events_summary(dicts), step)
        self.last_events_step = step
        self._write_diagnosis(step)
        # Flush first: a run that stops here (on_error="raise", a crash) has
        # its events on disk.
        self._file_writer().flush()
        if (
            self.config.on_error == "raise"
            and any(d.get("severity") == "error" for d in dicts)
            and self.diagnosis is not None
        ):
            self.instrument.fail_at_next_hook(self.failure(dict(self.diagnosis), dicts))

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
            self._add(summary.diagnosis_summary(diag["status"], diag["root_cause"]), step)

    def _save_batch(self, event) -> str | None:
        if not self.config.save_batches:
            return None
        return self.instrument.batches.save_for(event, self.writer.log_dir)

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
                self._add(summary.events_summary(dicts), at)
                self.last_events_step = last = at
            self._write_diagnosis(last)
        self._file_writer().flush()

    def _loss_row(self) -> int | None:
        for i, layer in enumerate(self.layers):
            if layer.get("name") == metadata.PSEUDO_LOSS:
                return i
        return None

    def _name_rank(self, d: dict) -> None:
        """The rank an event comes from, in a distributed run (see .distributed)."""
        if self.ranks is not None:
            self.ranks.name_ranks([d], [layer["name"] for layer in self.layers])
