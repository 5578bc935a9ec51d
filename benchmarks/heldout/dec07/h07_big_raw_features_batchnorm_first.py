"""Healthy: tabular regression on raw features in the thousands, standardised by a BatchNorm1d first layer.

Fools: the batch itself has values ~1e3-1e4 with std ~1e2 (an "unnormalised input" look), but
the first module normalises it, and everything after it is well scaled.
Source of the recipe: input BatchNorm as the first layer for unscaled tabular data (as in
fastai's tabular model, ``bn_cont``: https://docs.fast.ai/tabular.model.html).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "raw inputs ~1e3-1e4, normalised inside the model by BatchNorm1d",
        "source": "https://docs.fast.ai/tabular.model.html (bn_cont)", "arch": "BatchNorm1d + MLP regressor"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    scale = torch.logspace(1, 2.5, 8)
    offset = torch.logspace(3, 4, 8)
    w = torch.randn(8, generator=g)
    model = nn.Sequential(nn.BatchNorm1d(8), nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        z = torch.randn(64, 8, generator=g)
        x = z * scale + offset
        y = (torch.tanh(z @ w) + 0.3 * z[:, 0]).unsqueeze(1)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.3)


if __name__ == "__main__":
    sys.exit(main(globals()))
