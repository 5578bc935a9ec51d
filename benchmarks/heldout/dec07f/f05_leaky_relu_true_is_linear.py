"""An MLP classifier built with ``nn.LeakyReLU(True)``, meant as ``inplace=True`` like ``nn.ReLU(True)``.

Bug: LeakyReLU's first positional argument is ``negative_slope``: True becomes a slope of 1.0 and
every "activation" is the identity. The network is linear and cannot separate the rings: the loss
stays at the linear model's floor (ln 2 for two concentric rings).
Source: https://github.com/PantoMatrix/PantoMatrix/issues/52 ("nn.LeakyReLU(True) should be
nn.LeakyReLU(inplace=True)"); torch.nn.LeakyReLU signature.
Fixed twin: ``nn.LeakyReLU(inplace=True)`` (slope 0.01).
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "nn.LeakyReLU(True): negative_slope=1.0, every activation is the identity, a linear model",
    "source": "https://github.com/PantoMatrix/PantoMatrix/issues/52; torch.nn.LeakyReLU signature",
    "arch": "MLP binary classifier (3 hidden layers, LeakyReLU)",
    "kind": ["loss_plateau"],
    "layer": ["<loss>", "act1", "act2", "act3"],
    "step": [0, 150],
}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)

    def act():
        return nn.LeakyReLU(inplace=True) if fixed else nn.LeakyReLU(True)

    model = nn.Sequential()
    model.add_module("fc1", nn.Linear(2, 64))
    model.add_module("act1", act())
    model.add_module("fc2", nn.Linear(64, 64))
    model.add_module("act2", act())
    model.add_module("fc3", nn.Linear(64, 64))
    model.add_module("act3", act())
    model.add_module("out", nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.BCEWithLogitsLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        y = torch.randint(0, 2, (128,), generator=g).float()
        ang = torch.rand(128, generator=g) * 6.2832
        rad = 1.0 + 1.0 * y + 0.15 * torch.randn(128, generator=g)
        x = torch.stack([rad * torch.cos(ang), rad * torch.sin(ang)], 1)
        opt.zero_grad()
        loss = crit(model(x).squeeze(1), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lb, lt = mean([r["loss"] for r in bug[-30:]]), mean([r["loss"] for r in twin[-30:]])
    held = abs(lb - math.log(2)) < 0.03 and lt < 0.3 * lb
    return held, f"last-30 loss bug {lb:.3g} (ln 2 = 0.693) twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
