"""Healthy: a wide MLP with dropout p=0.7 after every hidden layer.

Fools: 70 % of every hidden activation is zeroed at each step (a "dead"-looking zero fraction,
much larger than ReLU's own), and the per-step loss is noisy; it still trains.
Source of the recipe: Srivastava et al., "Dropout" (JMLR 2014), section 7 (p up to 0.8 in hidden layers).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "dropout 0.7: most hidden outputs are exactly 0 every step",
        "source": "Srivastava et al. JMLR 2014 sec. 7", "arch": "MLP classifier with dropout"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(
        nn.Linear(20, 512), nn.ReLU(), nn.Dropout(0.7),
        nn.Linear(512, 512), nn.ReLU(), nn.Dropout(0.7),
        nn.Linear(512, 4))
    w = torch.randn(20, 4, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randn(64, 20, generator=g)
        y = (x @ w).argmax(1)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.5)


if __name__ == "__main__":
    sys.exit(main(globals()))
