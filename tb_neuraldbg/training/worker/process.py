"""The writer's worker in a child process: ``watch(analysis="process")``.

Where a step is bound by Python (a small model, often on a GPU), the
worker's Python holds the GIL that the training thread needs, core to spare
or not. Here the same :class:`.worker.Worker`, driven by the same loop
(:func:`.worker.drive`), runs in a child process that reads the packets
from a pipe (``benchmarks/overhead.py --modes watched,process`` measures
the difference).

:class:`ProcessWorker` has the worker's interface (``start``, ``sync``,
``stop``, ``counters``). Its sender thread takes each step's packet from
the instrument's queue, waits for its host copy and writes it to the
child's stdin; its receiver thread takes what comes back: the Events the
worker writes (they go into this process's own event file, where the
user's scalars go too), the counters, ``sync``'s acknowledgements, the
failure of ``on_error="raise"``, and the requests for an event's batch
(held here, answered on a pipe of their own). A child that cannot start or
that dies is warned once, and a worker's thread takes over from the next
step (its diagnosis starting again; the rows the child held are lost).

The child is ``python -c`` calling :func:`serve` (:mod:`subprocess`, not
:mod:`multiprocessing`, whose spawn runs the user's script again where it
has no ``__main__`` guard); it imports numpy, not torch, and ends with the
run. Messages are numpy arrays' bytes and JSON; nothing is unpickled. POSIX
only (file descriptors passed to the child).

The child is started in a session of its own and ignores SIGINT and
SIGTERM: a Ctrl-C reaches the terminal's whole process group, and a job
scheduler may signal every process of a job, but the steps the child holds
are written only when the training process drains or closes it (its
signal handling, :mod:`..signals`). It still ends with the training
process: its input closes when that process closes it or ends, however.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import types

import numpy as np

from ..schedule import WatchConfig
from ..step.slots import StepPacket
from .thread import STOP, Counters, Drain, TrainingSink, Worker, drive, sync_queue, warn

__all__ = ["ProcessWorker", "serve"]

# A packet: step, K of the cross-entropy (-1: unknown), full statistics,
# values, layer-list JSON bytes (0: unchanged), ran rows (-1: None), batches
# held; then its rows, keys (int64) and values (float64), the layer list, ran.
_PACKET = struct.Struct("<qqbqqqq")
_LENGTH = struct.Struct("<q")
# The counters (.worker.Counters) of a burst done ("C") or of an
# acknowledgement ("K").
_COUNTS = struct.Struct("<qqbdqd")
# The child's program: the package root, then its two file descriptors.
_CHILD_MAIN = """import sys
root, out_fd, reply_fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if root not in sys.path:
    sys.path.append(root)
from tb_neuraldbg.training.worker.process import serve
serve(out_fd, reply_fd)
"""


def _json(obj) -> bytes:
    # (default=str: the config's include/exclude may hold module types,
    # which the child does not use)
    data = json.dumps(obj, default=str).encode()
    return _LENGTH.pack(len(data)) + data


class _Handover(Exception):
    """The child is gone: a worker's thread goes on from ``item``."""

    def __init__(self, item):
        super().__init__("the worker process is gone")
        self.item = item


class ProcessWorker:
    """The worker of :mod:`.worker` run in a child process (module docstring).

    The arguments of :class:`.worker.Worker` but ``ranks`` (a distributed
    run's collectives belong to the training process: the writer runs those
    with the thread). :meth:`start` raises ``OSError`` where the child
    cannot be started.
    """

    def __init__(self, sink: TrainingSink, config: WatchConfig, packets: queue.SimpleQueue):
        self.sink = sink
        self.config = config
        self.queue = packets
        self.thread: threading.Thread | None = None  # the sender (and, after a failure, the worker's thread)
        self.fallback: Worker | None = None
        self._receiver: threading.Thread | None = None
        self._proc: subprocess.Popen | None = None
        self._acks: collections.deque = collections.deque()  # sync's threading.Events, in the order sent
        self._lock = threading.Lock()
        self._dead = False
        self._warned_step = False
        self._layers = 0
        self._counts = Counters(0, 0, True, 0.0, 0, 0.0)

    # -- the worker's interface ---------------------------------------------------

    def counters(self) -> Counters:
        """The child's counters, and the thread's after it took over."""
        if self.fallback is None:
            return self._counts
        theirs = self.fallback.counters()
        return Counters(*(a + b for a, b in zip(self._counts, theirs)))._replace(
            engine_running=theirs.engine_running)

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
            # A session of its own: a terminal's Ctrl-C (SIGINT to its
            # foreground process group) must not end the child before the
            # training process drained it (test_signals.py decides).
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD_MAIN, root, str(out_w), str(reply_r)],
                stdin=subprocess.PIPE, pass_fds=(out_w, reply_r), close_fds=True, start_new_session=True)
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
            # The settings as the dataclass's fields (the thresholds a dict),
            # and the run's stored config (it imports torch: made here).
            self._send(b"I" + _json({"config": dataclasses.asdict(self.config), "stored": self.sink.config_json(),
                                     "tag": self.sink.tag()}))
        except BaseException:
            self._close_pipes()
            self._proc.kill()
            raise
        self.thread = threading.Thread(target=self._run, name="tb_neuraldbg-writer", daemon=True)
        self._receiver = threading.Thread(target=self._receive, name="tb_neuraldbg-receiver", daemon=True)
        self.thread.start()
        self._receiver.start()

    def sync(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far has been processed (at most
        ``timeout`` seconds); False if it was not: the sender passes the
        marker to the child, and its acknowledgement sets it."""
        return sync_queue(self.queue, self.thread, timeout)

    def drain(self, timeout: float | None = None) -> bool:
        """:meth:`sync`, and the child writes the rows it holds and has the
        file flushed (a :class:`.thread.Drain` marker) before acknowledging."""
        return sync_queue(self.queue, self.thread, timeout, Drain())

    def stop(self, timeout: float | None = None) -> bool:
        """Stop after what is queued: the child finishes the run (its last
        rows, the end-of-run events) and ends; False if that took longer
        than ``timeout`` seconds in all (the child is then killed)."""
        if self.thread is None:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        left = lambda: None if deadline is None else max(0.0, deadline - time.monotonic())  # noqa: E731
        self.queue.put(STOP)
        self.thread.join(left())
        ok = not self.thread.is_alive()
        proc = self._proc
        if proc is not None:
            try:
                proc.wait(left() if ok else 0.1)
            except subprocess.TimeoutExpired:
                proc.kill()
                ok = False
        if self._receiver is not None:
            # (what the child wrote last is still being passed on)
            self._receiver.join(5.0 if deadline is None else max(0.1, deadline - time.monotonic()))
        self._close_pipes()
        if not ok:
            self._warn(f"the writer's worker process did not finish within {timeout} s; the last steps may be missing")
        return ok

    def _warn(self, msg: str) -> None:
        warn(f"{self.sink.tag()}: {msg}")

    def _close_pipes(self) -> None:
        for close in (self._proc.stdin.close, self._out.close, lambda: os.close(self._reply)):
            try:
                close()
            except OSError:
                pass

    # -- the sender: the worker's loop, with the child in the worker's place ------

    def _run(self) -> None:
        try:
            drive(self, self._next, self._forward_sync)
        except _Handover as gone:
            # A worker's thread from here on, on the same queue, from the item
            # that found the child gone.
            self.fallback = Worker(self.sink, self.config, self.queue)
            drive(self.fallback, self.queue.get, threading.Event.set, first=gone.item)

    # What drive() calls on this thread: the child does the worker's part (it
    # keeps the time, so no idle() here; it analyses what came before a sync).

    def _next(self, timeout: None = None):
        item = self.queue.get()
        if self._dead:
            raise _Handover(item)
        return item

    def analyse(self) -> None:
        pass

    def write_held(self) -> None:
        pass  # (the child does: _forward_sync sends it the Drain)

    def feed(self, packet: StepPacket) -> None:
        try:
            self._send_packet(packet)
        except OSError:
            raise self._gone(packet) from None
        except Exception as e:  # noqa: BLE001 -- a step not sent costs that step only
            if not self._warned_step:
                self._warned_step = True
                self._warn(f"writer step failed: {type(e).__name__}: {e}")

    def finish(self) -> None:
        self._send_or_hand_over(STOP, b"E")

    def _forward_sync(self, marker: threading.Event) -> None:
        with self._lock:
            self._acks.append(marker)
        self._send_or_hand_over(marker, b"D" if isinstance(marker, Drain) else b"S")

    def _send_or_hand_over(self, item, data: bytes) -> None:
        try:
            self._send(data)
        except OSError:
            raise self._gone(item) from None

    def _gone(self, item) -> _Handover:
        self._receiver.join(5.0)  # (the child is gone: the receiver says why)
        self._died("its input closed")
        return _Handover(item)

    def _send_packet(self, p: StepPacket) -> None:
        values = p.host_values()  # (on CUDA: waits here for the copy, not in training)
        layers = b""
        if len(p.layers) != self._layers:
            self._layers = len(p.layers)
            layers = json.dumps(p.layers).encode()
        k = p.num_classes
        ran = None if p.ran is None else np.asarray(p.ran, np.int64)
        header = _PACKET.pack(int(p.step), -1 if k is None else int(k), int(p.stats), len(values), len(layers),
                              -1 if ran is None else len(ran), self.sink.batches_held())
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

    def _died(self, why: str) -> None:
        with self._lock:
            first = not self._dead
            self._dead = True
            waiting, self._acks = list(self._acks), collections.deque()
        for e in waiting:  # (what it was to acknowledge is lost)
            e.set()
        if first:
            self._warn(f"the writer's worker process ended ({why}); the writer's thread analyses the steps "
                  f"from here, its diagnosis starting again")

    # -- the receiver -------------------------------------------------------------

    def _receive(self) -> None:
        src = self._out
        file_writer = self.sink.file_writer
        try:
            while True:
                kind = src.read(1)
                if not kind:
                    break
                if kind == b"L":
                    file_writer().flush()
                    continue
                if kind in (b"C", b"K"):  # the counters: after a burst, or sync's acknowledgement
                    steps, rows, engine, cpu_s, cpu_steps, cpu_wall_s = _COUNTS.unpack(src.read(_COUNTS.size))
                    self._counts = Counters(steps, rows, bool(engine), cpu_s, cpu_steps, cpu_wall_s)
                    if kind == b"K":
                        with self._lock:
                            done = self._acks.popleft() if self._acks else None
                        if done is not None:
                            done.set()
                    continue
                (n,) = _LENGTH.unpack(src.read(_LENGTH.size))
                data = src.read(n)
                if kind == b"R":
                    file_writer().add_record(data)
                elif kind == b"F":
                    f = json.loads(data)
                    self.sink.fail(f["diagnosis"], f["events"])
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
            return self.sink.save_batch(types.SimpleNamespace(**event))
        except Exception as e:  # noqa: BLE001 -- as the thread's _safe("batch save")
            self._warn(f"writer batch save failed: {type(e).__name__}: {e}")
            return None


# -- the child ----------------------------------------------------------------------

_SYNC = object()  # drive()'s sync marker, in the child
_DRAIN = Drain()  # its drain marker


class _ChildSink:
    """The child's :class:`.worker.Sink`: the training process's event file,
    batches and hooks, each reached through a message (``out``), a batch's
    path answered on ``reply``. It is its own file writer: each Event's
    bytes go back."""

    def __init__(self, out, reply, stored: dict, tag: str):
        from tensorboard.compat.proto import event_pb2

        self.num_classes: int | None = None  # (these two: from each packet)
        self.held = 0
        self._out, self._reply, self._stored, self._tag = out, reply, stored, tag
        self._event = event_pb2.Event

    def file_writer(self) -> _ChildSink:
        return self

    def batches_held(self) -> int:
        return self.held

    def save_batch(self, event) -> str | None:
        self._out.write(b"B" + _json(event.to_dict()))
        self._out.flush()
        (n,) = _LENGTH.unpack(self._reply.read(_LENGTH.size))
        return self._reply.read(n).decode() or None

    def fail(self, diagnosis: dict, events: list) -> None:
        self._out.write(b"F" + _json({"diagnosis": diagnosis, "events": events}))

    def config_json(self) -> dict:
        return dict(self._stored, num_classes=self.num_classes)

    def tag(self) -> str:
        return self._tag

    def add_summary(self, summary, global_step=None) -> None:
        event = self._event(summary=summary, wall_time=time.time())
        if global_step is not None:
            event.step = int(global_step)
        data = event.SerializeToString()
        self._out.write(b"R" + _LENGTH.pack(len(data)) + data)

    def flush(self) -> None:
        self._out.write(b"L")  # (the worker flushes after an event: the training process's file)


class _Input:
    """The child's stdin: the training process's messages, as :func:`.worker.drive`'s items."""

    def __init__(self):
        self._raw = sys.stdin.buffer.raw  # (unbuffered: select() then sees what is unread)
        self.sink: _ChildSink | None = None  # (once the init message is read)
        self._layers: list = []

    def read(self, n: int) -> bytearray:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self._raw.readinto(view[got:])
            if not k:
                raise EOFError
            got += k
        return buf

    def next(self, timeout: float | None):
        if timeout is not None and not select.select([self._raw], [], [], timeout)[0]:
            raise queue.Empty
        try:
            kind = self.read(1)
        except EOFError:
            return STOP
        if kind == b"P":
            return self._packet()
        return {b"S": _SYNC, b"D": _DRAIN}.get(bytes(kind), STOP)

    def _packet(self) -> StepPacket:
        step, k, stats, nv, nl, nr, held = _PACKET.unpack(self.read(_PACKET.size))
        data = self.read(24 * nv)
        rows, keys = np.frombuffer(data, np.int64, nv), np.frombuffer(data, np.int64, nv, 8 * nv)
        values = np.frombuffer(data, np.float64, nv, 16 * nv)
        if nl:
            self._layers = json.loads(self.read(nl))
        ran = np.frombuffer(self.read(8 * nr), np.int64) if nr >= 0 else None
        self.sink.num_classes = None if k < 0 else k
        self.sink.held = held
        return StepPacket(step=step, rows=rows, keys=keys, layers=list(self._layers), stats=bool(stats),
                          host=[values], ran=ran, num_classes=self.sink.num_classes)


def _config(fields: dict) -> WatchConfig:
    """The run's :class:`.schedule.WatchConfig` again, from its fields."""
    from ...diagnosis import Thresholds

    t = fields["thresholds"]
    return WatchConfig(**dict(fields, thresholds=None if t is None else Thresholds(**t)))


def serve(out_fd: int, reply_fd: int) -> None:
    """The child's loop: packets from stdin, the worker's output to ``out_fd``."""
    # The training process decides when this ends (module docstring): a
    # signal meant for it (a Ctrl-C, a scheduler's SIGTERM to the job) must
    # not cut what this process holds.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    out = os.fdopen(out_fd, "wb")
    inp = _Input()
    if inp.read(1) != b"I":
        raise SystemExit("tb_neuraldbg worker process: no init message")
    (n,) = _LENGTH.unpack(inp.read(_LENGTH.size))
    init = json.loads(inp.read(n))
    inp.sink = _ChildSink(out, os.fdopen(reply_fd, "rb"), init["stored"], init["tag"])
    worker = Worker(inp.sink, _config(init["config"]))
    sent = -1  # the steps_analysed of the counters last sent

    def report(kind: bytes = b"C") -> None:
        """The counters, after a burst ("C") or as ``sync``'s acknowledgement ("K")."""
        nonlocal sent
        counts = worker.counters()
        sent = counts.steps_analysed
        out.write(kind + _COUNTS.pack(*counts))
        out.flush()

    def get(timeout: float | None = None):
        # Before each wait: what the worker wrote goes out, with its
        # counters when it analysed steps.
        if worker.steps_analysed != sent:
            report()
        else:
            out.flush()
        return inp.next(timeout)

    drive(worker, get, lambda marker: report(b"K"))
    report(b"K")
