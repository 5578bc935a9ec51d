"""Healthy: a regression onto [0, 1] targets through a sigmoid output, many targets near 0 or 1.

Fools: to fit targets of 0.01 and 0.99 the sigmoid's outputs sit near its flat ends (a
"saturated" output layer) by design; the MSE keeps falling.
Source of the recipe: bounded-target regression with a sigmoid output (e.g. predicting
proportions/probabilities; Bishop, "Pattern Recognition and Machine Learning", sec. 5.2).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "sigmoid output near 0/1 on purpose (targets 0.01 and 0.99)",
        "source": "Bishop PRML sec. 5.2 (sigmoid output for bounded targets)", "arch": "MLP regressor with Sigmoid head"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(6, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1), nn.Sigmoid())
    w = torch.randn(6, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(250):
        x = torch.randn(64, 6, generator=g)
        y = torch.sigmoid(4 * (x @ w)).clamp(0.01, 0.99).unsqueeze(1)
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
