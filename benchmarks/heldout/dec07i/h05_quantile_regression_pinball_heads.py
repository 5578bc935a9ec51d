"""Healthy: a probabilistic forecaster with three quantile heads (10 %, 50 %, 90 %) trained with
the pinball loss on heteroscedastic noisy targets.

What looks wrong: the pinball loss is piecewise linear, so its gradient per sample has constant
magnitude (tau or 1 - tau) however good the fit is, the loss has a high floor set by the noise
(it never approaches 0), and the batch loss stays noisy to the end.
Source: Koenker & Bassett, Econometrica 1978 (quantile regression); Wen et al. "A Multi-Horizon
Quantile Recurrent Forecaster" (MQ-RNN), 2017, sec. 3; pytorch-forecasting QuantileLoss.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {"healthy": True, "what": "pinball loss: constant-magnitude gradients, high noisy floor",
        "source": "Koenker & Bassett 1978; Wen et al. 2017 (MQ-RNN) sec. 3",
        "arch": "1-D CNN over a 32-step history + three quantile heads"}

TAUS = torch.tensor([0.1, 0.5, 0.9])


class QForecaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(1, 16, 5, padding=2), nn.GELU(), nn.Conv1d(16, 16, 5, padding=2), nn.GELU())
        self.q10 = nn.Linear(16 * 32, 1)
        self.q50 = nn.Linear(16 * 32, 1)
        self.q90 = nn.Linear(16 * 32, 1)

    def forward(self, x):
        h = self.conv(x).flatten(1)
        return torch.cat([self.q10(h), self.q50(h), self.q90(h)], 1)


def pinball(pred, y):
    err = y - pred
    return torch.maximum(TAUS * err, (TAUS - 1) * err).mean()


def batch(g, n=64):
    t0 = torch.rand(n, 1, generator=g) * 100
    t = t0 + torch.arange(33).float()
    level = torch.sin(2 * math.pi * t / 12)
    noise = (0.2 + 0.5 * (torch.sin(2 * math.pi * t / 40) > 0).float()) * torch.randn(n, 33, generator=g)
    s = level + noise
    return s[:, None, :32], s[:, 32:]


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = QForecaster()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        x, y = batch(g)
        opt.zero_grad()
        pred = model(x)
        loss = pinball(pred, y)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            with torch.no_grad():
                cover = float(((y >= pred[:, :1]) & (y <= pred[:, 2:])).float().mean())
            p.step(loss, cover=cover)
        opt.step()


def truth(bug, twin):
    ok, msg = loss_fell(bug, 0.6)
    cover = mean([r["cover"] for r in bug[-50:]])
    return ok and 0.65 < cover < 0.95, f"{msg}; 10-90 % interval coverage last-50 {cover:.3f} (nominal 0.8)"


if __name__ == "__main__":
    sys.exit(main(globals()))
