"""A GRU regressor whose epoch scheduler is stepped every batch: the rate is gone after 100 steps.

Bug: ``StepLR(step_size=30, gamma=0.1)`` is meant per epoch but ``scheduler.step()`` sits in the
batch loop; the rate falls 0.05 -> 5e-6 by step 120 and the GRU stops learning early.
Source: "Optimizing PyTorch Training with Advanced Learning Rate Schedulers", section on calling an
epoch scheduler inside the batch loop (https://runebook.dev/en/docs/pytorch/generated/torch.optim.lr_scheduler.lrscheduler/torch.optim.lr_scheduler.LRScheduler.step).
Fixed twin: ``scheduler.step()`` once per epoch (an epoch is 100 batches here).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, ratio  # noqa: E402

CASE = {
    "bug": "StepLR meant per epoch stepped per batch: lr x1e-4 by step 120",
    "source": "https://runebook.dev/en/docs/pytorch/generated/torch.optim.lr_scheduler.lrscheduler/torch.optim.lr_scheduler.LRScheduler.step",
    "arch": "GRU sequence regressor",
    "kind": ["loss_plateau", "frozen_weights", "vanishing_gradient"],
    "layer": ["<optimizer>"],
    "step": [30, 130],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(3, 32, batch_first=True)
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        h, _ = self.gru(x)
        return self.out(h[:, -1])


def batches(g, n=32, t=20):
    while True:
        x = torch.randn(n, t, 3, generator=g)
        y = (x[:, :, 0].cumsum(1)[:, -1:] * 0.3 + x[:, -5:, 1].sum(1, keepdim=True)).tanh()
        yield x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    it = batches(g)
    for step in range(300):
        x, y = next(it)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss, lr=opt.param_groups[0]["lr"])
        opt.step()
        if not fixed or (step + 1) % 100 == 0:
            sched.step()


def truth(bug, twin):
    lr = ratio(bug[150]["lr"], twin[150]["lr"])
    b, t = mean([r["loss"] for r in bug[-30:]]), mean([r["loss"] for r in twin[-30:]])
    moved_b = abs(bug[-1]["weight"]["out"] - bug[120]["weight"]["out"])
    moved_t = abs(twin[-1]["weight"]["out"] - twin[120]["weight"]["out"])
    held = lr < 1e-3 and b > 1.5 * t and moved_b < 0.01 * moved_t
    return held, f"lr at 150 bug/twin {lr:.1e}; last-30 loss bug {b:.3g} twin {t:.3g}; head moved after 120: bug {moved_b:.2e} twin {moved_t:.2e}"


if __name__ == "__main__":
    sys.exit(main(globals()))
