"""Healthy: a binarised MLP (BinaryNet): sign activations with a straight-through estimator.

Fools: every hidden activation is exactly -1 or +1 (100 % "saturated" by any |x| >= 0.99 reading)
for the whole run, and the straight-through gradient is cancelled where |pre-activation| > 1;
still the network learns the task (the loss falls several-fold, held-out accuracy high).
Source of the recipe: Courbariaux et al. 2016, "Binarized Neural Networks" (sign with the
hard-tanh straight-through estimator, sec. 1.3), Hubara et al. JMLR 2018.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "every hidden activation is exactly +-1 (sign with a straight-through estimator)",
        "source": "Courbariaux et al. 2016 sec. 1.3", "arch": "binarised MLP (BatchNorm + sign STE)"}


class SignSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.where(x >= 0, torch.ones_like(x), -torch.ones_like(x))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (x.abs() <= 1).to(grad_output.dtype)


class Sign(nn.Module):
    def forward(self, x):
        return SignSTE.apply(x)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    centers = torch.randn(6, 32, generator=g)
    model = nn.Sequential(nn.Linear(32, 128), nn.BatchNorm1d(128), Sign(), nn.Linear(128, 128), nn.BatchNorm1d(128),
                          Sign(), nn.Linear(128, 6))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("2", "5")) if probe else None
    for _ in range(200):
        y = torch.randint(0, 6, (128,), generator=g)
        x = centers[y] + 0.9 * torch.randn(128, 32, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.3)
    sat = min(r["act"]["5"]["sat99"] for r in bug)
    return fell and sat == 1.0, f"{said}; min fraction of |sign output| >= 0.99: {sat:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
