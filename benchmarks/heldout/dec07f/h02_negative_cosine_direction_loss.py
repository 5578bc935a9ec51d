"""Healthy: a direction regressor trained on the negative cosine similarity (loss from ~0 to -1).

Fools: the loss is negative from the start and ends near -1, its floor; it does not resemble a
cross-entropy or an MSE, and the output norm is free (only the direction is trained), so the
head's output scale drifts without meaning anything.
Source of the recipe: the negative-cosine objective of SimSiam (Chen & He CVPR 2021, eq. 1) and
BYOL, here as plain supervised direction regression.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {"healthy": True, "fools": "negative loss (-cosine), from ~0 down to its floor -1",
        "source": "Chen & He CVPR 2021 (SimSiam) eq. 1", "arch": "MLP regressor of unit directions"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(12, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8))
    w = torch.randn(12, 8, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(150):
        x = torch.randn(64, 12, generator=g)
        target = torch.tanh(x @ w)
        opt.zero_grad()
        loss = -nn.functional.cosine_similarity(model(x), target, dim=1).mean()
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    a, b = mean([r["loss"] for r in bug[:5]]), mean([r["loss"] for r in bug[-20:]])
    return a > -0.3 and b < -0.85, f"loss first-5 {a:.3g} -> last-20 {b:.3g} (floor -1)"


if __name__ == "__main__":
    sys.exit(main(globals()))
