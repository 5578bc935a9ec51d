"""What moving the writer's worker into a child process would save: a
measurement of the design, not a feature.

Where a step is bound by Python (a small model, often on a GPU), the
worker's Python (rows, diagnosis, summaries: about 0.5-0.8 ms a step
whatever the model's size) holds the GIL the training thread needs, so
training waits for it, core to spare or not (docs/COST.md). Here the same
``Worker`` runs in a child process instead (``python -c``, not
multiprocessing, whose spawn re-runs an unguarded script), fed one binary
message a step through a pipe (the step vector, its rows and keys; the layer
list when it grows) by a sender thread that the instrument's sink queues
each step's packet for, as it does for the worker's thread.
Each Event the child's worker would write comes back as bytes, and a
receiver thread of the training process hands them to its own event file's
writer thread (the user's scalars go to that file too, and TensorBoard reads
only the newest file of a run). What it leaves out, which a feature would
need: saving the batch behind an event, ``on_error="raise"``, the
distributed gather, a child that dies.

Modes, identical copies of the model in one process, in blocks whose order
rotates, each block ending with its worker caught up: ``bare``, ``bare2``
(the A/A control), ``thread`` (the writer as it is) and ``child``. Printed:
wall ratios to ``bare`` (the sum of blocks, and the median and range over
blocks), the training process's CPU ratio (the child's not counted), and
whether the rows and states the two writers wrote are the same.

Usage: python benchmarks/worker_process.py [--models tiny,micro] [--threads 1] [--blocks 12] [--steps 64]
                                          [--device cuda]
"""

from __future__ import annotations

import os

os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # before torch is imported: idle threads must not spin

import argparse  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import queue  # noqa: E402
import statistics  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import overhead  # noqa: E402

from tb_neuraldbg import DebugWriter, metadata  # noqa: E402

#: A packet's header: step, K of the cross-entropy (-1: unknown), full
#: statistics, values, layer-list JSON bytes (0: unchanged), ran rows (-1: None).
HEADER = struct.Struct("<qqbqqq")
LENGTH = struct.Struct("<q")

CHILD = r'''
import queue, select, struct, sys, time
import numpy as np
from tensorboard.compat.proto import event_pb2
from tb_neuraldbg import DebugWriter
from tb_neuraldbg.training.batches import BatchKeeper
from tb_neuraldbg.training.collector import StepPacket
from tb_neuraldbg.training.schedule import WatchConfig
from tb_neuraldbg.training.worker import BURST, BURST_WAIT_S, Worker
from tb_neuraldbg.training.writer import TrainingFailure

HEADER, LENGTH = struct.Struct("<qqbqqq"), struct.Struct("<q")
inp, out = sys.stdin.buffer.raw, sys.stdout.buffer  # (raw: select() sees what is unread)


class Instrument:
    """What the worker reads of the training side's instrument."""
    num_classes = optimizer = scaler = None
    batches = BatchKeeper()

    def fail_at_next_hook(self, failure):
        pass


class Back:
    """The training process's event file, seen from here: each Event's bytes go back."""

    def add_event(self, event, step=None, walltime=None):
        event.wall_time = time.time() if walltime is None else walltime
        if step is not None:
            event.step = int(step)
        data = event.SerializeToString()
        out.write(b"R" + LENGTH.pack(len(data)) + data)

    def add_summary(self, summary, global_step=None, walltime=None):
        self.add_event(event_pb2.Event(summary=summary), global_step, walltime)

    def flush(self):
        out.flush()


writer = DebugWriter(sys.argv[1])  # (its own event file stays empty: everything goes back)
back = Back()
writer._get_file_writer = lambda: back
instrument = Instrument()
worker = Worker(writer, instrument, WatchConfig(), queue.SimpleQueue(), failure=TrainingFailure)


def read(n):
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = inp.readinto(view[got:])
        if not k:
            raise EOFError
        got += k
    return buf


layers, pending = [], []
while True:
    if pending and not select.select([inp], [], [], BURST_WAIT_S)[0]:
        worker._process_all(pending)  # (a paused loop: analyse what came, as the thread does)
        continue
    kind = bytes(read(1))
    if kind == b"P":
        step, k, stats, n, nl, nr = HEADER.unpack(read(HEADER.size))
        rows, keys = np.frombuffer(read(8 * n), np.int64), np.frombuffer(read(8 * n), np.int64)
        values = np.frombuffer(read(8 * n), np.float64)
        if nl:
            import json
            layers = json.loads(bytes(read(nl)))
        ran = np.frombuffer(read(8 * nr), np.int64) if nr >= 0 else None
        instrument.num_classes = None if k < 0 else k
        pending.append(StepPacket(step=step, rows=rows, keys=keys, layers=list(layers), stats=bool(stats),
                                  host=[values], ran=ran))
        if len(pending) >= BURST:
            worker._process_all(pending)
    elif kind == b"S":  # caught up
        worker._process_all(pending)
        out.write(b"k")
        out.flush()
    else:  # the end
        worker._process_all(pending)
        worker._finish()
        out.write(b"k")
        out.flush()
        break
'''


class ChildWorker:
    """The instrument's sink (a queue, as the writer's), a sender thread
    (a packet's values, once its device copy is done, in one pipe write) and
    a receiver thread that writes what the child's worker sends back into
    ``writer``'s event file."""

    _SYNC, _END = object(), object()

    def __init__(self, instrument, writer: DebugWriter, scratch: str):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, scratch], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)
        self.fd = self.proc.stdin.fileno()
        self.instrument = instrument
        self.records = writer._get_file_writer().event_writer._async_writer  # (TensorBoard's, private)
        self.layers = 0
        self.acks = threading.Semaphore(0)
        self.queue = queue.SimpleQueue()
        self.sender = threading.Thread(target=self._send_all, daemon=True)
        self.receiver = threading.Thread(target=self._receive, daemon=True)
        self.sender.start()
        self.receiver.start()

    def __call__(self, packet) -> None:
        self.queue.put(packet)

    def _send_all(self) -> None:
        while True:
            item = self.queue.get()
            if item is self._SYNC:
                self._send(b"S")
            elif item is self._END:
                self._send(b"E")
                return
            else:
                self._send_packet(item)

    def _send_packet(self, packet) -> None:
        values = packet.host_values()  # (on CUDA: waits here for the copy, not in training)
        layers = b""
        if len(packet.layers) != self.layers:
            self.layers = len(packet.layers)
            layers = json.dumps(packet.layers).encode()
        k, ran = self.instrument.num_classes, packet.ran
        parts = [b"P", HEADER.pack(packet.step, -1 if k is None else k, int(packet.stats), len(values), len(layers),
                                   -1 if ran is None else len(ran)),
                 packet.rows.astype(np.int64, copy=False).tobytes(), packet.keys.astype(np.int64, copy=False).tobytes(),
                 values.tobytes(), layers]
        if ran is not None:
            parts.append(np.asarray(ran, np.int64).tobytes())
        self._send(b"".join(parts))

    def _send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def _receive(self) -> None:
        src = self.proc.stdout
        while True:
            kind = src.read(1)
            if not kind:
                return
            if kind == b"k":
                self.acks.release()
            else:
                (n,) = LENGTH.unpack(src.read(LENGTH.size))
                self.records.write(src.read(n))

    def sync(self) -> None:
        self.queue.put(self._SYNC)
        self.acks.acquire()

    def close(self) -> None:
        self.queue.put(self._END)
        self.acks.acquire()
        self.proc.stdin.close()
        self.proc.wait()
        self.receiver.join()


def _rows(logdir: str) -> dict:
    """{tag: [(step, bytes of the tensor)]} of the rows and states in ``logdir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    acc = EventAccumulator(logdir, size_guidance={"tensors": 0})
    acc.Reload()
    tags = [metadata.TAG_STATES] + [metadata.stats_tag(m) for m in metadata.METRICS]
    return {t: [(e.step, tensor_util.make_ndarray(e.tensor_proto).tobytes()) for e in acc.Tensors(t)] for t in tags}


def measure(name: str, blocks: int, steps: int, device: torch.device) -> None:
    torch.manual_seed(0)
    with device:
        base, shape, classes = overhead.MODELS[name]()
        x, y = torch.randn(*shape), torch.randint(0, classes, (shape[0],))
    crit = nn.CrossEntropyLoss()
    tmp = tempfile.mkdtemp(prefix=f"worker_process_{name}_")

    class Runner:
        def __init__(self, mode):
            self.model = copy.deepcopy(base)
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
            self.writer = self.child = None
            if mode in ("thread", "child"):
                self.writer = DebugWriter(os.path.join(tmp, mode))
                handle = self.writer.watch(self.model, optimizer=self.opt, criterion=crit, start_step=1000)
                if mode == "child":
                    self.child = ChildWorker(handle.instrument, self.writer, os.path.join(tmp, "scratch"))
                    handle.instrument.sink = self.child  # (the writer's own worker thread then idles)

        def steps(self, n):
            for _ in range(n):
                self.opt.zero_grad(set_to_none=True)
                crit(self.model(x), y).backward()
                self.opt.step()
            if self.child is not None:
                self.child.sync()
            elif self.writer is not None:
                self.writer._worker.sync(60)
            if device.type == "cuda":
                torch.cuda.synchronize()

        def close(self):
            if self.child is not None:
                self.child.close()
            if self.writer is not None:
                self.writer.close()

    modes = ["bare", "bare2", "thread", "child"]
    runners = {m: Runner(m) for m in modes}
    for r in runners.values():  # (the child's start and first burst, the kernels' build)
        r.steps(20)
    wall = {m: [] for m in modes}
    cpu = {m: [] for m in modes}
    for b in range(blocks):
        for m in modes[b % len(modes):] + modes[: b % len(modes)]:
            t0, c0 = time.perf_counter(), time.process_time()
            runners[m].steps(steps)
            wall[m].append(time.perf_counter() - t0)
            cpu[m].append(time.process_time() - c0)
    for r in runners.values():
        r.close()
    written = _rows(os.path.join(tmp, "thread"))
    same = written == _rows(os.path.join(tmp, "child"))
    print(f"{name}: bare step {statistics.median(wall['bare']) / steps * 1e3:.2f} ms, {blocks} blocks x {steps} steps")
    for m in modes[1:]:
        ratios = [a / b for a, b in zip(wall[m], wall["bare"])]
        print(f"  {m:7s} wall {sum(wall[m]) / sum(wall['bare']):.3f}, median block {statistics.median(ratios):.3f} "
              f"({min(ratios):.2f}-{max(ratios):.2f}); training process's CPU {sum(cpu[m]) / sum(cpu['bare']):.3f}")
    print(f"  rows and states written ({len(written[metadata.TAG_STATES])} steps): "
          f"{'the same' if same else 'DIFFERENT'} from the thread and from the child")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="tiny,micro")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--blocks", type=int, default=12)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--device", default="cpu")
    a = p.parse_args(argv)
    if os.name != "posix":
        print("needs a POSIX system (select() on a pipe)")
        return 1
    torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {a.threads} threads"
    print(f"torch {torch.__version__}, {where}, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}")
    for name in a.models.split(","):
        measure(name, a.blocks, a.steps, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
