"""Step time of a watched torch.compile'd model against the bare compiled one
and against eager, on CPU (an 8x512 ReLU MLP, batch 128).

Six copies train inside one process: eager bare, eager bare again (the A/A
control, whose ratio is the noise), eager watched, and the same three
compiled (the default inductor backend; ``--backend eager`` for dynamo
alone). Two passes, as in benchmarks/overhead.py:

* blocks: each mode trains ``--steps`` steps in turn, in an order that
  rotates from block to block; a watched block ends with the writer's
  ``flush()`` (its worker's share counts). Printed: each mode's median step
  time, and its ratio to the bare mode of its kind, block by block: median
  (min-max);
* ``--alternate N`` rounds in which every mode trains one step in turn, a
  watched step timed until the writer's worker has caught up with it:
  neighbouring steps see the same machine, so the drift that makes block
  ratios noisy cancels out. Printed: the ratio of the sums of steps, wall
  and process CPU time (every thread).

Usage: python benchmarks/compile_overhead.py [--blocks 8] [--steps 20] [--alternate 200] [--backend inductor]
"""

from __future__ import annotations

import os

os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # before torch is imported: idle threads must not spin

import argparse  # noqa: E402
import copy  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

from tb_neuraldbg import DebugWriter  # noqa: E402

MODES = ("eager", "eager_aa", "eager+watch", "compiled", "compiled_aa", "compiled+watch")


def mlp() -> nn.Module:
    torch.manual_seed(0)
    layers = []
    for _ in range(8):
        layers += [nn.Linear(512, 512), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(512, 10))


def bare_of(mode: str) -> str:
    """The bare mode a mode's ratio is taken against."""
    return "compiled" if mode.startswith("compiled") else "eager"


class Runner:
    """One copy of the model, its optimizer and, when watched, its writer."""

    def __init__(self, mode: str, base: nn.Module, backend: str, logdir: str):
        self.model = copy.deepcopy(base)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.run = torch.compile(self.model, backend=backend) if mode.startswith("compiled") else self.model
        self.writer = None
        if mode.endswith("watch"):
            self.writer = DebugWriter(logdir)
            self.writer.watch(self.run, optimizer=self.opt, criterion=nn.CrossEntropyLoss())

    def steps(self, n: int, x, y, crit) -> None:
        for _ in range(n):
            self.opt.zero_grad()
            crit(self.run(x), y).backward()
            self.opt.step()

    def caught_up(self, flush: bool = True) -> None:
        """The writer's worker done with every step so far (and, with
        ``flush``, the event file flushed, as at the end of a block)."""
        if self.writer is not None:
            if flush:
                self.writer.flush()
            else:
                self.writer._worker.sync(60)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--alternate", type=int, default=0, help="rounds of one step a mode (0: no such pass)")
    p.add_argument("--backend", default="inductor")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    base = mlp()
    x, y = torch.randn(128, 512), torch.randint(0, 10, (128,))
    crit = nn.CrossEntropyLoss()
    tmp = tempfile.mkdtemp()
    runners = {m: Runner(m, base, a.backend, f"{tmp}/{m}") for m in MODES}
    for r in runners.values():  # warm-up (compilation, the writer's first steps)
        r.steps(12, x, y, crit)
        r.caught_up()
    print(f"torch {torch.__version__}, {a.threads} threads, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}, "
          f"backend {a.backend}; the _aa modes are A/A controls (the noise)")

    times = {m: [] for m in MODES}
    names = list(MODES)
    for b in range(a.blocks):
        for m in names[b % len(names):] + names[: b % len(names)]:
            r = runners[m]
            t0 = time.perf_counter()
            r.steps(a.steps, x, y, crit)
            r.caught_up()
            times[m].append((time.perf_counter() - t0) / a.steps)
    print(f"blocks: {a.blocks} x {a.steps} steps a mode; ratio to the bare mode of its kind, "
          "median (min-max) over blocks")
    eager_med = statistics.median(times["eager"])
    for m in names:
        ratios = [t / tb for t, tb in zip(times[m], times[bare_of(m)])]
        med = statistics.median(times[m])
        print(f"  {m:16s} {med * 1e3:7.2f} ms/step  x{statistics.median(ratios):.3f} "
              f"({min(ratios):.2f}-{max(ratios):.2f}) of its bare mode  x{med / eager_med:.3f} of eager")

    if a.alternate:
        wall = {m: 0.0 for m in MODES}
        cpu = {m: 0.0 for m in MODES}
        for i in range(a.alternate):
            order = names[i % len(names):] + names[: i % len(names)]
            for m in order:
                r = runners[m]
                t0, c0 = time.perf_counter(), time.process_time()
                r.steps(1, x, y, crit)
                r.caught_up(flush=False)
                wall[m] += time.perf_counter() - t0
                cpu[m] += time.process_time() - c0
        print(f"alternated: {a.alternate} rounds of one step a mode; ratio of the sums to the bare mode of its kind")
        for m in names:
            print(f"  {m:16s} {wall[m] / a.alternate * 1e3:7.2f} ms/step  wall x{wall[m] / wall[bare_of(m)]:.3f}  "
                  f"cpu x{cpu[m] / cpu[bare_of(m)]:.3f}  wall x{wall[m] / wall['eager']:.3f} of eager")
    for r in runners.values():
        r.close()


if __name__ == "__main__":
    main()
