"""The writer's worker in a child process: ``watch(analysis="process")``.

Where a step is bound by Python (a small model, often on a GPU), the
worker's Python (rows, diagnosis, summaries: about 0.5-0.8 ms a step
whatever the model's size) holds the GIL that the training thread needs,
and training waits for it, core to spare or not; no window of the step is
free of that wait (the backward takes the GIL too: docs/COST.md). Here the
same :class:`.worker.Worker` runs in a child process: on the CPU, ``tiny``
(101 modules, 5 ms a step) 1.28-1.34x -> 1.22x, ``micro`` (0.2 ms) 6.0x ->
4.2x (``benchmarks/overhead.py --modes bare,bare2,watched,process``).

:class:`ProcessWorker` has the worker's interface (``start``, ``sync``,
``stop``, the counters). Its thread takes each step's packet from the
instrument's queue, waits for its host copy, and writes it to the child's
stdin in one message; its receiver thread takes what the child sends back:
each Event the worker writes (as bytes: they go into this process's own
event file, where the user's scalars go too and which TensorBoard follows),
the acknowledgements of ``sync`` and the counters after each burst (for
``DebugWriter.stats_info``), the failure of ``on_error="raise"``, and
the requests for an event's batch (the batches are held here), answered on
a pipe of their own. A child that cannot start or that dies is warned once,
and the worker's thread takes over from the next step (its diagnosis starts
again; the rows the child held, its ring's last ``ring`` steps and those
in flight to it, are lost).

The child is ``python -c`` calling :func:`serve` (started with
:mod:`subprocess`, not :mod:`multiprocessing`, whose spawn runs the user's
script again where it has no ``__main__`` guard); it ends with the run.
Messages are binary (numpy arrays' bytes) and JSON; nothing is unpickled.
POSIX only (file descriptors passed to the child).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import queue
import select
import struct
import subprocess
import sys
import threading
import time
import types
import warnings

import numpy as np

from .schedule import WatchConfig
from .step.slots import StepPacket
from .worker import BURST, BURST_WAIT_S, IDLE_CLOSE_S, Worker, training_tag

__all__ = ["ProcessWorker", "serve"]

log = logging.getLogger("tb_neuraldbg")

# A packet: step, K of the cross-entropy (-1: unknown), full statistics,
# values, layer-list JSON bytes (0: unchanged), ran rows (-1: None), batches held.
_PACKET = struct.Struct("<qqbqqqq")
_LENGTH = struct.Struct("<q")
# The counters of an acknowledgement ("K") or of a burst done ("C"): steps
# analysed, rows written, engine running, CPU seconds and the steps they cover.
_COUNTS = struct.Struct("<qqbdq")
# The child's program: the package root, then its two file descriptors.
_CHILD_MAIN = """import sys
root, out_fd, reply_fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if root not in sys.path:
    sys.path.append(root)
from tb_neuraldbg.training.worker_process import serve
serve(out_fd, reply_fd)
"""


def _json(obj) -> bytes:
    data = json.dumps(obj).encode()
    return _LENGTH.pack(len(data)) + data


class ProcessWorker:
    """The worker of :mod:`.worker` run in a child process (module docstring).

    The same arguments as :class:`.worker.Worker` but ``ranks`` (a
    distributed run's collectives belong to the training process: the
    writer runs those with the thread). :meth:`start` raises ``OSError``
    where the child cannot be started.
    """

    _STOP = Worker._STOP

    def __init__(self, writer, instrument, config: WatchConfig, packets: queue.SimpleQueue, failure):
        self.writer = writer
        self.instrument = instrument
        self.config = config
        self.queue = packets
        self.failure = failure
        self.thread: threading.Thread | None = None  # the sender (and, after a failure, the worker's thread)
        self.fallback: Worker | None = None
        self._receiver: threading.Thread | None = None
        self._proc: subprocess.Popen | None = None
        self._acks: collections.deque = collections.deque()  # threading.Events, in the order sent
        self._lock = threading.Lock()
        self._dead = False
        self._warned_step = False
        self._layers = 0
        self._counts = (0, 0, True, 0.0, 0)

    # -- the worker's interface -------------------------------------------------

    @property
    def steps_analysed(self) -> int:
        return self._counts[0] + (self.fallback.steps_analysed if self.fallback else 0)

    @property
    def rows_written(self) -> int:
        return self._counts[1] + (self.fallback.rows_written if self.fallback else 0)

    @property
    def engine_running(self) -> bool:
        return self.fallback.engine_running if self.fallback else bool(self._counts[2])

    @property
    def cpu_s(self) -> float:
        return self._counts[3] + (self.fallback.cpu_s if self.fallback else 0.0)

    @property
    def cpu_steps(self) -> int:
        return self._counts[4] + (self.fallback.cpu_steps if self.fallback else 0)

    def start(self) -> None:
        """Start the child and the threads that talk to it (once)."""
        if self.thread is not None:
            return
        if os.name != "posix":
            raise OSError("a worker process needs a POSIX system")
        out_r, out_w = os.pipe()  # child -> here
        reply_r, reply_w = os.pipe()  # here -> child: the answers to its requests
        # The package as this process imported it, a source checkout too:
        # appended to the child's path (not put first through PYTHONPATH,
        # where a site directory would come before the standard library).
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD_MAIN, root, str(out_w), str(reply_r)],
                stdin=subprocess.PIPE, pass_fds=(out_w, reply_r), close_fds=True)
        except BaseException:
            os.close(out_r)
            os.close(reply_w)
            raise
        finally:
            os.close(out_w)
            os.close(reply_r)
        self._out = os.fdopen(out_r, "rb")
        self._reply = reply_w
        try:
            self._send(b"I" + _json(self._init()))
        except BaseException:
            self._close_pipes()
            self._proc.kill()
            raise
        self.thread = threading.Thread(target=self._run, name="tb_neuraldbg-writer", daemon=True)
        self._receiver = threading.Thread(target=self._receive, name="tb_neuraldbg-receiver", daemon=True)
        self.thread.start()
        self._receiver.start()

    #: Wait until everything queued so far has been processed (at most
    #: ``timeout`` seconds); False if it was not: the sender passes the
    #: marker to the child, and its acknowledgement sets it.
    sync = Worker.sync

    def stop(self, timeout: float | None = None) -> bool:
        """Stop after what is queued: the child finishes the run (its last
        rows, the end-of-run events) and ends; False if that took longer
        than ``timeout`` seconds (the child is then killed)."""
        if self.thread is None:
            return True
        self.queue.put(self._STOP)
        self.thread.join(timeout)
        ok = not self.thread.is_alive()
        proc = self._proc
        if proc is not None:
            try:
                proc.wait(timeout if ok else 0.1)
            except subprocess.TimeoutExpired:
                proc.kill()
                ok = False
        if self._receiver is not None:
            self._receiver.join(5.0)
        self._close_pipes()
        if not ok:
            _warn(f"the writer's worker process did not finish within {timeout} s; the last steps may be missing")
        return ok

    def _close_pipes(self) -> None:
        for close in (self._proc.stdin.close, self._out.close, lambda: os.close(self._reply)):
            try:
                close()
            except OSError:
                pass

    # -- the sender ---------------------------------------------------------------

    def _init(self) -> dict:
        cfg = self.config
        fields = {k: getattr(cfg, k) for k in ("stats_every", "update_every", "hist_every", "full_steps", "ring",
                                               "on_error", "start_step", "save_batches", "nonfinite")}
        thresholds = cfg.thresholds.to_dict() if cfg.thresholds is not None else None
        stored = Worker._config_json(self)  # (its num_classes: the child's, from each packet)
        return {"log_dir": str(getattr(self.writer, "log_dir", "")), "config": fields, "thresholds": thresholds,
                "stored": stored, "tag": training_tag()}

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if self._dead:
                self._take_over(item)
                return
            try:
                if isinstance(item, StepPacket):
                    self._send_packet(item)
                elif item is self._STOP:
                    self._send(b"E")
                    return
                elif isinstance(item, threading.Event):
                    with self._lock:
                        self._acks.append(item)
                    self._send(b"S")
            except OSError:  # (the child is gone: the receiver says why)
                self._receiver.join(5.0)
                self._died("its input closed")
                self._take_over(item)
                return
            except Exception as e:  # noqa: BLE001 -- a step not sent costs that step only
                if not self._warned_step:
                    self._warned_step = True
                    _warn(f"writer step failed: {type(e).__name__}: {e}")

    def _send_packet(self, p: StepPacket) -> None:
        values = p.host_values()  # (on CUDA: waits here for the copy, not in training)
        layers = b""
        if len(p.layers) != self._layers:
            self._layers = len(p.layers)
            layers = json.dumps(p.layers).encode()
        k = self.instrument.num_classes
        ran = None if p.ran is None else np.asarray(p.ran, np.int64)
        header = _PACKET.pack(int(p.step), -1 if k is None else int(k), int(p.stats), len(values), len(layers),
                              -1 if ran is None else len(ran), self.instrument.batches.held)
        parts = [b"P", header, np.asarray(p.rows, np.int64).tobytes(), np.asarray(p.keys, np.int64).tobytes(),
                 np.ascontiguousarray(values, np.float64).tobytes(), layers]
        if ran is not None:
            parts.append(ran.tobytes())
        self._send(b"".join(parts))

    def _send(self, data: bytes) -> None:
        fd = self._proc.stdin.fileno()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    def _take_over(self, item) -> None:
        """The worker's thread from here on (the child died): this thread
        runs it, on the same queue, beginning with ``item``."""
        w = self.fallback = Worker(self.writer, self.instrument, self.config, self.queue, self.failure)
        w.thread = self.thread
        if isinstance(item, StepPacket):
            w._process_all([item])
        elif item is self._STOP:
            w._safe("finish", w._finish)
            return
        elif isinstance(item, threading.Event):
            item.set()
        w._run()

    def _died(self, why: str) -> None:
        with self._lock:
            first = not self._dead
            self._dead = True
            waiting, self._acks = list(self._acks), collections.deque()
        for e in waiting:  # (what it was to acknowledge is lost)
            e.set()
        if first:
            _warn(f"the writer's worker process ended ({why}); the writer's thread analyses the steps "
                  f"from here, its diagnosis starting again")

    # -- the receiver -------------------------------------------------------------

    def _receive(self) -> None:
        src = self._out
        records = _record_writer(self.writer)
        try:
            while True:
                kind = src.read(1)
                if not kind:
                    break
                if kind == b"L":
                    _flush(self.writer)
                    continue
                if kind in (b"C", b"K"):  # the counters: after a burst, or sync's acknowledgement
                    self._counts = _COUNTS.unpack(src.read(_COUNTS.size))
                    if kind == b"K":
                        with self._lock:
                            done = self._acks.popleft() if self._acks else None
                        if done is not None:
                            done.set()
                    continue
                (n,) = _LENGTH.unpack(src.read(_LENGTH.size))
                data = src.read(n)
                if kind == b"R":
                    records(data)
                elif kind == b"F":
                    f = json.loads(data)
                    self.instrument.fail_at_next_hook(self.failure(f["diagnosis"], f["events"]))
                elif kind == b"B":
                    path = (self._save_batch(json.loads(data)) or "").encode()
                    os.write(self._reply, _LENGTH.pack(len(path)) + path)
        except (OSError, ValueError, struct.error) as e:
            self._died(f"{type(e).__name__}: {e}")
            return
        finally:
            src.close()
        code = self._proc.wait() if self._proc is not None else None
        if code:
            self._died(f"exit status {code}")

    def _save_batch(self, event: dict) -> str | None:
        try:
            return self.instrument.batches.save_for(types.SimpleNamespace(**event), self.writer.log_dir)
        except Exception as e:  # noqa: BLE001 -- as the thread's _safe("batch save")
            _warn(f"writer batch save failed: {type(e).__name__}: {e}")
            return None


def _warn(msg: str) -> None:
    msg = f"{training_tag()}: {msg}"
    warnings.warn(msg, RuntimeWarning)
    log.warning(msg)


def _flush(writer) -> None:
    fw = writer._get_file_writer()
    try:
        fw.flush()
    except Exception as e:  # noqa: BLE001 -- (the guard's own flush does not raise either)
        fw.fail("flush", e)


def _record_writer(writer):
    """A function that writes one serialized Event into ``writer``'s event
    file: handed to TensorBoard's writer thread as it is where that thread is
    reachable, else parsed again and added as an Event; a failure is the
    file's guard's (warned once, the write dropped)."""
    from tensorboard.compat.proto import event_pb2

    def write(data: bytes) -> None:
        fw = writer._get_file_writer()
        inner = getattr(fw, "inner", None)
        raw = getattr(getattr(getattr(inner, "event_writer", None), "_async_writer", None), "write", None)
        try:
            if raw is not None and not fw.failed:
                raw(data)
            else:
                event = event_pb2.Event.FromString(data)
                fw.add_event(event, step=event.step, walltime=event.wall_time)
        except Exception as e:  # noqa: BLE001 -- a file error never raises into training
            fw.fail("write", e)

    return write


# -- the child ----------------------------------------------------------------------


class _Instrument:
    """What the worker reads of the training side, in the child."""

    num_classes = optimizer = scaler = None

    def __init__(self, send, ask):
        self.batches = _Batches(ask)
        self._send = send

    def fail_at_next_hook(self, failure) -> None:
        self._send(b"F" + _json({"diagnosis": failure.diagnosis, "events": failure.events}))


class _Batches:
    """The training process's batches, seen from the child: a save is a request."""

    held = BURST + 2

    def __init__(self, ask):
        self._ask = ask

    def save_for(self, event, log_dir) -> str | None:
        return self._ask(event.to_dict()) or None


class _Failure(Exception):
    """``on_error="raise"``'s failure, carried back to the training process."""

    def __init__(self, diagnosis, events):
        super().__init__("training is failing")
        self.diagnosis, self.events = diagnosis, events


class _Back:
    """The training process's event file, seen from the child: each Event's bytes go back."""

    failed = False

    def __init__(self, send):
        from tensorboard.compat.proto import event_pb2

        self._event = event_pb2.Event
        self._send = send

    def add_event(self, event, step=None, walltime=None) -> None:
        event.wall_time = time.time() if walltime is None else walltime
        if step is not None:
            event.step = int(step)
        data = event.SerializeToString()
        self._send(b"R" + _LENGTH.pack(len(data)) + data)

    def add_summary(self, summary, global_step=None, walltime=None) -> None:
        self.add_event(self._event(summary=summary), global_step, walltime)

    def flush(self) -> None:
        self._send(b"L")  # (the worker flushes after an event: the training process's file)


def serve(out_fd: int, reply_fd: int) -> None:
    """The child's loop: packets from stdin, the worker's output to ``out_fd``."""
    from ..diagnosis import Thresholds

    inp = sys.stdin.buffer.raw  # (unbuffered: select() then sees what is unread)
    out = os.fdopen(out_fd, "wb")
    reply = os.fdopen(reply_fd, "rb")

    def read(n: int) -> bytes:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = inp.readinto(view[got:])
            if not k:
                raise EOFError
            got += k
        return bytes(buf)

    send = out.write

    def ask(event: dict) -> str:
        out.write(b"B" + _json(event))
        out.flush()
        (n,) = _LENGTH.unpack(reply.read(_LENGTH.size))
        return reply.read(n).decode()

    if read(1) != b"I":
        raise SystemExit("tb_neuraldbg worker process: no init message")
    (n,) = _LENGTH.unpack(read(_LENGTH.size))
    init = json.loads(read(n))
    t = init["thresholds"]
    config = WatchConfig(**init["config"], thresholds=None if t is None else Thresholds(**t))
    stored = init["stored"]
    instrument = _Instrument(send, ask)
    writer = types.SimpleNamespace(log_dir=init["log_dir"])
    back = _Back(send)

    class ChildWorker(Worker):
        def tag(self) -> str:
            return init["tag"]

        def _file_writer(self):
            return back

        def _config_json(self):
            return dict(stored, num_classes=instrument.num_classes)

    worker = ChildWorker(writer, instrument, config, queue.SimpleQueue(), failure=_Failure)

    def counts(kind: bytes = b"C") -> None:
        """The counters, after a burst ("C") or as ``sync``'s acknowledgement ("K")."""
        out.write(kind + _COUNTS.pack(worker.steps_analysed, worker.rows_written, worker.engine_running,
                                      worker.cpu_s, worker.cpu_steps))
        out.flush()

    layers: list = []
    pending: list = []
    while True:
        wait = BURST_WAIT_S if pending else (IDLE_CLOSE_S if worker.blocks.pending else None)
        if wait is not None and not select.select([inp], [], [], wait)[0]:
            if pending:  # (a paused loop: analyse what came, as the thread does)
                worker._process_all(pending)
                counts()
            else:  # (no step for a while, a block open)
                worker._safe("block", worker._close_idle_block)
                out.flush()
            continue
        try:
            kind = read(1)
        except EOFError:
            kind = b"E"
        if kind == b"P":
            step, k, stats, nv, nl, nr, held = _PACKET.unpack(read(_PACKET.size))
            rows = np.frombuffer(read(8 * nv), np.int64)
            keys = np.frombuffer(read(8 * nv), np.int64)
            values = np.frombuffer(read(8 * nv), np.float64)
            if nl:
                layers = json.loads(read(nl))
            ran = np.frombuffer(read(8 * nr), np.int64) if nr >= 0 else None
            instrument.num_classes = None if k < 0 else k
            instrument.batches.held = held
            pending.append(StepPacket(step=step, rows=rows, keys=keys, layers=list(layers), stats=bool(stats),
                                      host=[values], ran=ran))
            if len(pending) >= worker._burst():
                worker._process_all(pending)
                counts()
        elif kind == b"S":
            worker._process_all(pending)
            counts(b"K")
        else:
            worker._process_all(pending)
            worker._safe("finish", worker._finish)
            counts(b"K")
            return

