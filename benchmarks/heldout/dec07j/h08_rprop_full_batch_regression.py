"""Healthy: full-batch Rprop on a tabular regression (sign-based steps that grow and shrink).

Fools: Rprop ignores the gradient's size: each weight moves by its own step size (starting at
0.01, grown x1.2 / shrunk x0.5 by sign agreement), so the update/gradient ratio swings by orders
of magnitude and is unrelated to the rate; the same full batch every step (a constant batch on
purpose); the loss starts high (targets in the tens) and falls by orders of magnitude.
Source of the recipe: Riedmiller & Braun ICNN 1993, "A direct adaptive method for faster
backpropagation learning: the RPROP algorithm"; torch.optim.Rprop.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "Rprop sign steps on the same full batch every step; targets in the tens",
        "source": "Riedmiller & Braun 1993; torch.optim.Rprop", "arch": "MLP regressor (tanh), full batch"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(400, 6, generator=g)
    y = 20 + 8 * torch.tanh(x[:, 0] * x[:, 1]) + 5 * x[:, 2] - 3 * x[:, 3] ** 2
    model = nn.Sequential(nn.Linear(6, 48), nn.Tanh(), nn.Linear(48, 48), nn.Tanh(), nn.Linear(48, 1))
    opt = torch.optim.Rprop(model.parameters(), lr=0.01)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        opt.zero_grad()
        loss = (model(x).squeeze(1) - y).pow(2).mean()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.02)


if __name__ == "__main__":
    sys.exit(main(globals()))
