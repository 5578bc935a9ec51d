"""Healthy: a classifier trained with label_smoothing=0.3: the loss levels off far above zero.

Fools: with smoothed targets the cross-entropy cannot go below the targets' entropy (~1.1 here for
K=8), so the loss flattens at a high value while accuracy is perfect: a plateau by design.
Source of the recipe: Szegedy et al., "Rethinking the Inception Architecture" (CVPR 2016, sec. 7,
label-smoothing regularisation); ``nn.CrossEntropyLoss(label_smoothing=...)``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {"healthy": True, "fools": "loss floor ~1.1 from label smoothing 0.3: an early, high plateau",
        "source": "Szegedy et al. CVPR 2016 sec. 7", "arch": "MLP classifier (8 classes, GELU)"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(16, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 8))
    proto = torch.randn(8, 16, generator=g) * 2
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.CrossEntropyLoss(label_smoothing=0.3)
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(250):
        y = torch.randint(0, 8, (64,), generator=g)
        x = proto[y] + 0.5 * torch.randn(64, 16, generator=g)
        opt.zero_grad()
        out = model(x)
        loss = crit(out, y)
        loss.backward()
        if p:
            p.step(loss, acc=float((out.argmax(1) == y).float().mean()))
        opt.step()


def truth(bug, twin):
    b = mean([r["loss"] for r in bug[-50:]])
    acc = mean([r["acc"] for r in bug[-50:]])
    return acc > 0.99 and b > 1.0, f"last-50 loss {b:.3g} (floor from smoothing) with accuracy {acc:.3f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
