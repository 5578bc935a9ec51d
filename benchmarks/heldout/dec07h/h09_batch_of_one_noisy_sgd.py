"""Online SGD with a batch of one on heavy-tailed noisy targets: the per-step loss jumps 1000x.

Healthy, built to fool: each step sees one sample whose target noise is Student-t (3 degrees of
freedom), so the recorded loss swings over three orders of magnitude from step to step and has
spikes far above its running level; the model still converges (measured on a fixed held-out set).
Source: Bottou 2010 "Large-scale machine learning with stochastic gradient descent" (online SGD);
Zhang et al. NeurIPS 2020 "Why are adaptive methods good for attention models?" (heavy-tailed noise).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {"healthy": True, "what": "batch size 1 on Student-t target noise: the step loss swings 1000x, held-out loss falls",
        "source": "Bottou 2010 (online SGD); Zhang et al. NeurIPS 2020 (heavy-tailed gradient noise)",
        "arch": "small MLP regressor (ReLU), SGD lr 0.01, batch 1"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    w = torch.tensor([[1.0], [-2.0], [0.5], [1.5]])
    xt = torch.randn(512, 4, generator=g)
    yt = xt @ w
    for _ in range(300):
        x = torch.randn(1, 4, generator=g)
        noise = torch.randn(1, 1, generator=g) / (torch.randn(3, generator=g).pow(2).sum() / 3).sqrt()  # Student-t(3)
        y = x @ w + noise
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            with torch.no_grad():
                held_out = float(crit(model(xt), yt))
            p.step(loss, held_out=held_out)
        opt.step()


def truth(bug, twin):
    h0, h1 = bug[0]["held_out"], mean([r["held_out"] for r in bug[-20:]])
    losses = [r["loss"] for r in bug]
    swing = max(losses) / max(min(losses), 1e-12)
    return h1 < 0.2 * h0 and swing > 1e3, f"held-out MSE step 0 {h0:.3g} -> last-20 {h1:.3g}; step loss max/min {swing:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
