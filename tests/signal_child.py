"""A training script for the signal and kill tests (tests/test_signals.py,
tests/test_resume.py), run as a child process:

    python signal_child.py LOGDIR ANALYSIS NAN_AT READY_AT [user-handler] [flush]

It trains a small model with a DebugWriter, a NaN batch at step NAN_AT, and
after step READY_AT prints "ready" and stops stepping (as a loop that moved
on to an evaluation), waiting to be signalled. Bursts wait for their eighth
step here (not half a second), so that the steps after the last full burst,
the NaN batch among them, are still held by the writer's thread when the
signal comes: what a signal used to lose. "user-handler": a SIGTERM handler
of the script's own, installed before the writer, that prints and exits 3.
"flush": writer.flush() after READY_AT (what is on disk for a SIGKILL).
"stuck": the writer's worker blocks for good once "ready" is printed, with
drain_timeout=1: a drain that cannot finish must still end at its bound.
"""

import signal
import sys
import threading
import time

import torch
from torch import nn

from tb_neuraldbg import DebugWriter
from tb_neuraldbg.training.worker import thread as worker_thread

logdir, analysis, nan_at, ready_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
options = set(sys.argv[5:])
worker_thread.BURST_WAIT_S = 600.0

if "user-handler" in options:
    def on_term(signum, frame):
        print("user handler", signum, flush=True)
        sys.exit(3)

    signal.signal(signal.SIGTERM, on_term)

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
crit = nn.CrossEntropyLoss()
stuck = threading.Event()
if "stuck" in options:
    real_process = worker_thread.Worker._process

    def blocked(self, *args, **kwargs):
        if stuck.is_set():
            threading.Event().wait()  # for good
        return real_process(self, *args, **kwargs)

    worker_thread.Worker._process = blocked
writer = DebugWriter(logdir, drain_timeout=1.0) if "stuck" in options else DebugWriter(logdir)
writer.watch(model, optimizer=opt, criterion=crit, analysis=analysis)
g = torch.Generator().manual_seed(1)
for step in range(ready_at + 1):
    x = torch.randn(16, 4, generator=g)
    if step == nan_at:
        x[0, 0] = float("nan")
    opt.zero_grad()
    crit(model(x), torch.randint(0, 3, (16,), generator=g)).backward()
    opt.step()
if "flush" in options:
    writer.flush()
stuck.set()
print("ready", flush=True)
while True:
    time.sleep(0.05)
