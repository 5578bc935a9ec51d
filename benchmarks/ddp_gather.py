"""Cost of gathering the per-rank statistics (ranks="gather", the default)
under torchrun: one gather of a float32 [layers, 12] block per step, on the
writer's worker thread (not the training thread).

    torchrun --standalone --nproc_per_node=2 benchmarks/ddp_gather.py [--layers 64 256] [--calls 500]

Prints, on rank 0, the median time of one gather and its size, and the step
time of a small DDP MLP watched with ranks="gather" against ranks="each"
(a run per rank, all_gather) and unwatched, in interleaved blocks.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from tb_neuraldbg import DebugWriter, metadata
from tb_neuraldbg.training.distributed import RANK_METRICS, RankGather


def time_gathers(layers: int, calls: int) -> float:
    gather = RankGather.create()
    row = np.random.default_rng(0).random((layers, len(metadata.METRICS)), dtype=np.float32)
    times = []
    for step in range(calls):
        t0 = time.perf_counter()
        gather.gather(step, row)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def step_times(blocks: int, steps: int) -> dict:
    torch.manual_seed(0)
    modes = {}
    tmp = tempfile.mkdtemp()
    for mode in ("bare", "gather", "each"):
        model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(8)], nn.Linear(256, 10))
        ddp = nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        writer = None
        if mode != "bare":
            writer = DebugWriter(f"{tmp}/{mode}", ranks=mode)
            writer.watch(ddp, optimizer=opt, criterion=nn.CrossEntropyLoss())
        modes[mode] = (ddp, opt, writer)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    out = {m: [] for m in modes}
    for b in range(blocks):
        for mode, (ddp, opt, _) in modes.items():
            t0 = time.perf_counter()
            for _ in range(steps):
                opt.zero_grad()
                nn.functional.cross_entropy(ddp(x), y).backward()
                opt.step()
            out[mode].append((time.perf_counter() - t0) / steps)
    for _, _, writer in modes.values():
        if writer is not None:
            writer.close()
    return {m: statistics.median(t) for m, t in out.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, nargs="+", default=[64, 256])
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--blocks", type=int, default=6)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    for layers in a.layers:
        t = time_gathers(layers, a.calls)
        if dist.get_rank() == 0:
            kb = layers * len(RANK_METRICS) * 4 / 1024
            print(f"gather of [{layers} x {len(RANK_METRICS)}] float32 ({kb:.1f} KiB a rank): {t * 1e6:.0f} us median")
    times = step_times(a.blocks, a.steps)
    if dist.get_rank() == 0:
        for mode, t in times.items():
            print(f"step, {mode:6s}: {t * 1e3:6.2f} ms  x{t / times['bare']:.3f} of bare")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
