"""Healthy: a GRU classifier under CosineAnnealingWarmRestarts: the rate jumps back up every 60 steps.

Fools: at each restart the learning rate is multiplied by ~100 in one step and the loss bumps up
briefly; these are scheduled, and training continues.
Source of the recipe: Loshchilov & Hutter, "SGDR: Stochastic Gradient Descent with Warm Restarts"
(ICLR 2017); torch.optim.lr_scheduler.CosineAnnealingWarmRestarts.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "lr restarts x100 in one step every 60 steps",
        "source": "Loshchilov & Hutter ICLR 2017 (SGDR)", "arch": "GRU sequence classifier"}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 32, batch_first=True)
        self.out = nn.Linear(32, 3)

    def forward(self, x):
        h, _ = self.gru(x)
        return self.out(h[:, -1])


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=60, eta_min=5e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(240):
        x = torch.randn(32, 15, 4, generator=g)
        y = (x[:, :, 0].sum(1) > 1.5).long() + (x[:, :, 0].sum(1) > -1.5).long()
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()
        sched.step()


def truth(bug, twin):
    return loss_fell(bug, 0.5)


if __name__ == "__main__":
    sys.exit(main(globals()))
