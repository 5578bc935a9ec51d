"""A DDP (or FSDP2) training script for tests/test_distributed.py, run by
torchrun on CPU with gloo: every rank makes its own DebugWriter, as users do.

    torchrun --standalone --nproc_per_node=2 tests/ddp_train.py LOGDIR
        [--bad-rank R --bad-step S] [--ranks gather|each] [--steps N] [--fsdp]

Writes LOGDIR/truth_rank<r>.json: per step the norms of the gradients the
optimizer applied (after the all-reduce; whole parameters under FSDP2).
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn

from tb_neuraldbg import DebugWriter


def main():
    p = argparse.ArgumentParser()
    p.add_argument("logdir")
    p.add_argument("--bad-rank", type=int, default=None)
    p.add_argument("--bad-step", type=int, default=None)
    p.add_argument("--ranks", default="gather")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--fsdp", action="store_true")
    p.add_argument("--no-step", action="store_true")  # the optimizer never steps (tests/test_never_stepped.py)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3))
    if a.fsdp:
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
        wrapped = model
    else:
        wrapped = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    crit = nn.CrossEntropyLoss()
    writer = DebugWriter(a.logdir, ranks=a.ranks)
    writer.watch(wrapped, optimizer=opt, criterion=crit, stats_every=5)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    truth = []
    for step in range(a.steps):
        x = torch.randn(16, 8, generator=g)
        y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
        if rank == a.bad_rank and step == a.bad_step:
            x[3, 2] = float("nan")
        opt.zero_grad()
        crit(wrapped(x), y).backward()
        norms = {}
        for name, param in model.named_parameters():
            grad = param.grad
            if hasattr(grad, "full_tensor"):
                grad = grad.full_tensor()
            norms[name] = float(grad.norm())
        if not a.no_step:
            opt.step()
        for name, param in model.named_parameters():
            full = param.full_tensor() if hasattr(param, "full_tensor") else param
            norms["w:" + name] = float(full.detach().norm())
        truth.append(norms)
    writer.add_scalar("user/rank", rank, 0)  # SummaryWriter's own: rank 1's goes to rank1/
    writer.close()
    with open(os.path.join(a.logdir, f"truth_rank{rank}.json"), "w") as f:
        json.dump(truth, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
