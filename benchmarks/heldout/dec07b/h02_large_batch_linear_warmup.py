"""Healthy: large-batch SGD (batch 512, lr scaled to 0.8) with a linear warmup over 60 steps.

Fools: the rate starts at 1/60 of its peak (the first updates are 60x smaller than the later
ones), then reaches 0.8, a rate that would look "too large" alone, at batch 512.
Source of the recipe: Goyal et al. 2017, "Accurate, Large Minibatch SGD" sec. 2.1-2.2 (linear
scaling rule and gradual warmup).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "a 60-step warmup from 1/60 of the peak, then a large rate (0.8) at batch 512",
        "source": "Goyal et al. 2017 sec. 2.1-2.2", "arch": "CNN classifier (Conv2d x2 + BatchNorm + linear)"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                          nn.Flatten(), nn.Linear(64, 6))
    proto = torch.randn(6, 1, 12, 12, generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.8, momentum=0.9, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 60))
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(160):
        y = torch.randint(0, 6, (512,), generator=g)
        x = proto[y] + 1.2 * torch.randn(512, 1, 12, 12, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()
        sched.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.3)
    return fell, said


if __name__ == "__main__":
    sys.exit(main(globals()))
