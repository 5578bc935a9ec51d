"""Healthy: an MLP that memorises a 16-example dataset (the "overfit one batch" sanity check).

Fools: the same batch every step; the loss falls to ~1e-4 and below and the gradients shrink by
orders of magnitude as it converges: a vanishing gradient that means "done".
Source of the recipe: Karpathy, "A Recipe for Training Neural Networks" (2019), "overfit one
batch"; the Lightning Trainer's ``overfit_batches`` option.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {"healthy": True, "fools": "one fixed batch memorised: loss ~1e-4, gradients down by orders of magnitude",
        "source": "Karpathy 2019 'overfit one batch'; Lightning overfit_batches", "arch": "MLP classifier (GELU)"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))
    x = torch.randn(16, 8, generator=g)
    y = torch.randint(0, 4, (16,), generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    l1 = mean([r["loss"] for r in bug[-20:]])
    g0, g1 = bug[0]["grad"]["0"], mean([r["grad"]["0"] for r in bug[-20:]])
    return l1 < 1e-2 and g1 < 0.05 * g0, f"loss step 0 {bug[0]['loss']:.3g} -> last-20 {l1:.3g}; layer 0 grad {g0:.3g} -> {g1:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
