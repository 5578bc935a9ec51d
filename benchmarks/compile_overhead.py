"""Step time of a watched torch.compile'd model against the bare compiled one
and against eager, on CPU (an 8x512 ReLU MLP, batch 128).

Four copies train in interleaved blocks inside one process: eager bare,
eager watched, compiled bare, compiled watched (the default inductor backend;
``--backend eager`` for dynamo alone). Printed: each mode's median step time
over blocks and its ratio to the bare mode of the same kind.

Usage: python benchmarks/compile_overhead.py [--blocks 8] [--steps 20] [--backend inductor]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time

import torch
from torch import nn

from tb_neuraldbg import DebugWriter


def mlp() -> nn.Module:
    torch.manual_seed(0)
    layers = []
    for _ in range(8):
        layers += [nn.Linear(512, 512), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(512, 10))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--backend", default="inductor")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    base = mlp()
    x, y = torch.randn(128, 512), torch.randint(0, 10, (128,))
    crit = nn.CrossEntropyLoss()
    modes, writers = {}, []
    tmp = tempfile.mkdtemp()
    for name in ("eager", "eager+watch", "compiled", "compiled+watch"):
        m = copy.deepcopy(base)
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        run = torch.compile(m, backend=a.backend) if name.startswith("compiled") else m
        if name.endswith("watch"):
            w = DebugWriter(f"{tmp}/{name}")
            w.watch(run, optimizer=opt, criterion=crit)
            writers.append(w)
        modes[name] = (run, opt)

    def step(run, opt):
        opt.zero_grad()
        crit(run(x), y).backward()
        opt.step()

    for run, opt in modes.values():  # warm-up (compilation)
        for _ in range(12):
            step(run, opt)
    times = {n: [] for n in modes}
    names = list(modes)
    for b in range(a.blocks):
        for n in names[b % 4 :] + names[: b % 4]:
            run, opt = modes[n]
            t0 = time.perf_counter()
            for _ in range(a.steps):
                step(run, opt)
            times[n].append((time.perf_counter() - t0) / a.steps)
    for w in writers:
        w.close()
    med = {n: statistics.median(t) for n, t in times.items()}
    for n in names:
        ref = med["compiled" if n.startswith("compiled") else "eager"]
        print(f"{n:16s} {med[n] * 1e3:8.2f} ms/step  x{med[n] / ref:.3f} of its bare mode  x{med[n] / med['eager']:.3f} of eager")


if __name__ == "__main__":
    main()
