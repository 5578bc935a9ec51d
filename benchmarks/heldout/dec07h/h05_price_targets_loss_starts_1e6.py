"""A price regressor on raw dollar-thousands targets: the loss starts near 1e6 and falls >1000x.

Healthy, built to fool: targets are ~1000 +- 300 (prices in $k) and the model's output starts
near 0, so the first MSE is ~1e6 and the first gradients are in the thousands; Adam's
scale-free steps bring the output layer's bias up and the loss falls to the noise level.
Source: https://scikit-learn.org/stable/datasets/real_world.html#california-housing-dataset
(raw-unit targets); Adam (Kingma & Ba 2015) sec. 2.1 (step size invariant to gradient scale).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "what": "raw-unit regression targets ~1000: initial MSE ~1e6, large early gradients, then falls >1000x",
        "source": "Kingma & Ba ICLR 2015 sec. 2.1; scikit-learn California housing (raw targets)",
        "arch": "tabular MLP regressor (ReLU), Adam lr 0.05"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=5e-2)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    w = torch.randn(8, 1, generator=g)
    for _ in range(250):
        x = torch.randn(128, 8, generator=g)
        y = 1000 + 150 * (x @ w) / 3 + 100 * torch.tanh(x[:, :1]) + 5 * torch.randn(128, 1, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    ok, detail = loss_fell(bug, 1e-3)
    return ok and bug[0]["loss"] > 5e5, f"{detail}; step 0 loss {bug[0]['loss']:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
