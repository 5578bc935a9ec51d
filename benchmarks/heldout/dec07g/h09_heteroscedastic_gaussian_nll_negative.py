"""Heteroscedastic regression with nn.GaussianNLLLoss and a softplus variance head.

Healthy, built to fool: the loss goes negative (a Gaussian NLL with variance < 1/(2 pi e) is below
zero) and keeps falling below zero as the variance head learns the small noise; the variance head
(softplus) outputs values near 0 on the quiet half of the inputs. It fits mean and noise level.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {"healthy": True, "arch": "MLP with mean and softplus-variance heads, GaussianNLLLoss",
        "fools": "negative, still-falling loss; variance head near 0 on half the inputs"}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act1 = nn.Linear(4, 64), nn.Tanh()
        self.fc2, self.act2 = nn.Linear(64, 64), nn.Tanh()
        self.mean_head = nn.Linear(64, 1)
        self.var_head = nn.Linear(64, 1)

    def forward(self, x):
        h = self.act2(self.fc2(self.act1(self.fc1(x))))
        return self.mean_head(h), F.softplus(self.var_head(h)) + 1e-6


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.GaussianNLLLoss()
    if writer is not None:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(250):
        x = torch.randn(128, 4, generator=g)
        noise = torch.where(x[:, :1] > 0, 0.02, 0.3)
        y = torch.sin(2 * x[:, :1]) + 0.5 * x[:, 1:2] + noise * torch.randn(128, 1, generator=g)
        mu, var = model(x)
        loss = crit(mu, y, var)
        opt.zero_grad()
        loss.backward()
        if writer is not None:
            writer.record(loss=loss)
        if p:
            p.step(loss, mse=float(((mu - y) ** 2).mean().detach()))
        opt.step()


def truth(bug, twin):
    first = mean([r["loss"] for r in bug[:10]])
    last = mean([r["loss"] for r in bug[-20:]])
    mse = mean([r["mse"] for r in bug[-20:]])
    return last < -0.5 and last < first - 1.0 and mse < 0.1, f"loss first-10 {first:.3g} -> last-20 {last:.3g}; mse last-20 {mse:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
