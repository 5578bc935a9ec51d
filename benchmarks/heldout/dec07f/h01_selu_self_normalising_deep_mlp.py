"""Healthy: a 16-layer self-normalising MLP (SELU, LeCun-normal init, no normalisation layers).

Fools: half the activations are negative (down to -1.76) and none is ever exactly 0; sixteen plain
layers without residuals or norms, whose per-layer gradient norms differ, train fine because SELU
keeps mean 0 / variance 1 through depth.
Source of the recipe: Klambauer et al. NeurIPS 2017 (self-normalizing networks), sec. 2 and the
LeCun-normal initialisation.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {"healthy": True, "fools": "16 plain SELU layers: negative activations, no norm layers, deep but stable",
        "source": "Klambauer et al. NeurIPS 2017", "arch": "deep SELU MLP classifier"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    layers = []
    width, prev = 64, 20
    for i in range(16):
        lin = nn.Linear(prev, width)
        nn.init.normal_(lin.weight, std=prev ** -0.5)
        nn.init.zeros_(lin.bias)
        layers += [lin, nn.SELU()]
        prev = width
    layers.append(nn.Linear(width, 6))
    model = nn.Sequential(*layers)
    proto = torch.randn(6, 20, generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("29",)) if probe else None
    for _ in range(150):
        y = torch.randint(0, 6, (64,), generator=g)
        x = proto[y] + 0.9 * torch.randn(64, 20, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.3)
    std = mean([r["act"]["29"]["std"] for r in bug])
    return fell and 0.3 < std < 3, f"{said}; last SELU output std {std:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
