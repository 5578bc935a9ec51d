"""Healthy: a CNN regressor under ReduceLROnPlateau: the rate is cut 10x three times during the run.

Fools: the learning rate drops by an order of magnitude in one step, three times, and the updates
shrink with it; each cut is the scheduler's doing and the loss keeps improving after it.
GELU, not ReLU: with ReLU this recipe lost 12 of 16 channels of its second layer in the first
steps (a real dying-ReLU problem, not a healthy run). Source of the recipe: torch.optim.lr_scheduler.ReduceLROnPlateau (patience/factor), the standard
"reduce on plateau" schedule of many image-regression baselines.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "lr cut x0.1 in one step, three times (scheduled)",
        "source": "torch.optim.lr_scheduler.ReduceLROnPlateau", "arch": "CNN regressor (GELU)"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.GELU(), nn.Conv2d(16, 16, 3, padding=1), nn.GELU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.1, patience=1, threshold=0.05, min_lr=3e-6)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    running = 0.0
    for step in range(240):
        x = torch.randn(32, 1, 8, 8, generator=g)
        y = x.abs().mean((1, 2, 3)).unsqueeze(1) * 3
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss, lr=opt.param_groups[0]["lr"])
        opt.step()
        running += float(loss.detach())
        if step % 10 == 9:                          # an "epoch" of 10 batches
            sched.step(running / 10)
            running = 0.0


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.3)
    cuts = sum(1 for r0, r1 in zip(bug, bug[1:]) if r1["lr"] < 0.5 * r0["lr"])
    return fell and cuts == 3, f"{said}; lr cuts {cuts}"


if __name__ == "__main__":
    sys.exit(main(globals()))
