"""Healthy: SGD with a triangular cyclic learning rate (1e-3 to 0.1 and back, period 50 steps).

Fools: the rate rises 100x within 25 steps, three times; the loss wobbles upward near each peak
and falls again, and momentum cycles against it.
Source of the recipe: Smith, "Cyclical Learning Rates for Training Neural Networks", WACV 2017
sec. 3.1; torch.optim.lr_scheduler.CyclicLR (mode='triangular').
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "learning rate cycles x100 up and down every 50 steps",
        "source": "Smith WACV 2017 sec. 3.1; torch.optim.lr_scheduler.CyclicLR", "arch": "MLP classifier (GELU)"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(20, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 5))
    proto = torch.randn(5, 20, generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    sched = torch.optim.lr_scheduler.CyclicLR(opt, base_lr=1e-3, max_lr=0.1, step_size_up=25)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        y = torch.randint(0, 5, (64,), generator=g)
        x = proto[y] + 1.0 * torch.randn(64, 20, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss, lr=opt.param_groups[0]["lr"])
        opt.step()
        sched.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.3)
    lrs = [r["lr"] for r in bug]
    return fell and max(lrs) / min(lrs) > 50, f"{said}; lr range {min(lrs):.3g}-{max(lrs):.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
