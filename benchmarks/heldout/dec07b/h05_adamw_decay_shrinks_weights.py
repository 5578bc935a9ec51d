"""Healthy: an over-parameterised MLP regressor under AdamW with strong decoupled weight decay (2.0).

Fools: the weight norms fall steadily (the first layer's to under half its initial norm) while
the loss falls too: shrinking weights by design, not collapse.
Source of the recipe: Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019
(AdamW); torch.optim.AdamW.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "weight norms shrink steadily under AdamW weight_decay=2.0 while the loss falls",
        "source": "Loshchilov & Hutter ICLR 2019 (AdamW)", "arch": "MLP regressor, 512-wide hidden layers"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(6, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=2.0)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    w = torch.randn(6, 1, generator=g)
    for _ in range(200):
        x = torch.randn(64, 6, generator=g)
        y = torch.sin(x @ w)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.3)
    shrink = bug[-1]["weight"]["2"] / bug[0]["weight"]["2"]
    return fell and shrink < 0.6, f"{said}; layer 2 weight norm end/start {shrink:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
