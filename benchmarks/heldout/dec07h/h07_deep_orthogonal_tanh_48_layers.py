"""A 48-layer plain (non-residual) tanh MLP with orthogonal init: deep, no skips, and it trains.

Healthy, built to fool: 48 Linear+Tanh layers of width 64 with orthogonal weights (gain 1) and zero
biases keep the signal's norm near-isometric, so a plain deep stack learns without residuals or
normalisation; per-layer gradient norms vary along the depth and the updates of the middle layers
are small.
Source: Saxe et al. ICLR 2014 (orthogonal init, dynamical isometry); Pennington et al. NeurIPS 2017
sec. 5.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "what": "48-layer plain tanh MLP with orthogonal init (no residuals, no normalisation)",
        "source": "Saxe et al. ICLR 2014; Pennington et al. NeurIPS 2017 sec. 5",
        "arch": "48 x (Linear 64 + Tanh) + linear head"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    mods = []
    for i in range(48):
        lin = nn.Linear(16 if i == 0 else 64, 64)
        nn.init.orthogonal_(lin.weight)
        nn.init.zeros_(lin.bias)
        mods += [lin, nn.Tanh()]
    model = nn.Sequential()
    model.add_module("body", nn.Sequential(*mods))
    model.add_module("head", nn.Linear(64, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    w = torch.randn(16, 3, generator=g)
    for _ in range(200):
        x = torch.randn(128, 16, generator=g)
        y = (x @ w).argmax(1)
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
