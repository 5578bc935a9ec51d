"""Healthy: a deep (8 hidden layers) maxout network with dropout.

Fools: each maxout unit passes gradient through only its winning piece, so a large share of the
linear pieces' outputs get exactly zero gradient each step (gated units), the net is deep and
narrow, and dropout makes the loss noisy; it still learns.
Source of the recipe: Goodfellow et al. ICML 2013, "Maxout Networks" sec. 2-3.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "8 maxout layers (3 pieces each, only the winner gets gradient) + dropout 0.2",
        "source": "Goodfellow et al. ICML 2013 sec. 2-3", "arch": "deep maxout MLP with residual-free stacking"}


class Maxout(nn.Module):
    def __init__(self, n_in, n_out, pieces=3):
        super().__init__()
        self.pieces = pieces
        self.lin = nn.Linear(n_in, n_out * pieces)

    def forward(self, x):
        return self.lin(x).view(x.shape[0], -1, self.pieces).max(dim=2).values


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    layers = [Maxout(16, 48)]
    for _ in range(7):
        layers += [nn.Dropout(0.2), Maxout(48, 48)]
    model = nn.Sequential(*layers, nn.Linear(48, 4))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.CrossEntropyLoss()
    w = torch.randn(16, 4, generator=g)
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randn(128, 16, generator=g)
        y = (x @ w).argmax(1)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.5)


if __name__ == "__main__":
    sys.exit(main(globals()))
