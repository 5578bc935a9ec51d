"""A full step's cost with and without the one-call module reads, alternated step by step.

Between processes this VM's speed drifts by a third within the hour, more than
a change of a few milliseconds a full step; so here one watched model and one
bare copy train in one process, every step a full-statistics one
(``stats_every=1``, no histogram or update step), and each pair of steps
(bare, then watched) runs in one of two modes chosen in an alternating order:
``one_call`` (a module's input and output read by ``grads.cpp``'s ``measure``,
the default) and ``ctypes`` (the same reads through the kernel's ctypes calls,
as before 2026-12-05 evening: ``Instrument.one_call_reads = False``). A
third mode, ``one_call_again``, repeats the first: the A/A control, whose
difference is the noise. Printed per mode: the median and quartiles of the
watched step's CPU time above the bare step's (the training thread's, whole
step), and the ratio of the medians to ``one_call``'s.

Usage: python benchmarks/full_step_ab.py [--models big,transformer] [--steps 40]
"""

from __future__ import annotations

import os

os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # before torch is imported: idle threads must not spin

import argparse  # noqa: E402
import copy  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import overhead  # noqa: E402  (its models)

from tb_neuraldbg import DebugWriter  # noqa: E402
from tb_neuraldbg.training import grad_reader  # noqa: E402

MODES = ("one_call", "ctypes", "one_call_again")


def run(name: str, steps: int, warm: int = 5) -> dict[str, list[float]]:
    torch.manual_seed(0)
    model, shape, classes = overhead.MODELS[name]()
    bare = copy.deepcopy(model)
    crit = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=gen)
    y = torch.randint(0, classes, (shape[0],), generator=gen)
    opt_w = torch.optim.Adam(model.parameters(), 1e-4)
    opt_b = torch.optim.Adam(bare.parameters(), 1e-4)
    writer = DebugWriter(tempfile.mkdtemp(prefix="full_step_ab-"))
    inst = writer.watch(model, optimizer=opt_w, criterion=crit, stats_every=1, hist_every=10**9,
                        update_every=10**9).instrument
    if not grad_reader.wait(600):
        raise SystemExit("the C++ extension cannot be built here: nothing to compare")

    def step(m, opt) -> float:
        t0 = time.thread_time()
        opt.zero_grad(set_to_none=True)
        crit(m(x), y).backward()
        opt.step()
        return time.thread_time() - t0

    for _ in range(warm):
        step(model, opt_w)
        step(bare, opt_b)
    extra: dict[str, list[float]] = {m: [] for m in MODES}
    for i in range(steps):
        order = MODES[i % 3:] + MODES[: i % 3]  # each mode in each place in turn
        for mode in order:
            # (the schedule of the next step is computed at the end of this one:
            # set the reads here and for the step that runs now)
            inst.one_call_reads = mode != "ctypes"
            inst._fast_measure = grad_reader.measure_fn() if inst.one_call_reads else None
            b = step(bare, opt_b)
            w = step(model, opt_w)
            extra[mode].append((w - b) * 1e3)
    writer.close()
    return extra


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="big,transformer")
    p.add_argument("--steps", type=int, default=40, help="full steps per mode")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, CPU, {a.threads} threads; every step a full one; "
          "watched step's CPU time above the bare copy's, ms (median [quartiles])")
    for name in a.models.split(","):
        extra = run(name, a.steps)
        ref = statistics.median(extra["one_call"])
        print(f"{name}:")
        for mode in MODES:
            d = extra[mode]
            q = statistics.quantiles(d, n=4)
            med = statistics.median(d)
            print(f"  {mode:15s} +{med:7.2f} ms  [{q[0]:.1f}, {q[2]:.1f}]  x{med / ref:.2f} of one_call's")


if __name__ == "__main__":
    main()
