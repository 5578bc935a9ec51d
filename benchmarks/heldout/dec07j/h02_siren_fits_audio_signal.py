"""Healthy: a SIREN (sine activations, w0 = 30) fitting a 1-D audio-like signal.

Fools: the first layer's pre-activations span about +-30 radians on purpose; the sine units'
outputs sit at their extremes a large share of the time and the loss falls by orders of
magnitude from a small start (~0.04) to ~4e-4.
Source of the recipe: Sitzmann et al. NeurIPS 2020, "Implicit Neural Representations with
Periodic Activation Functions" sec. 3.2 (init U(-1/n, 1/n) first layer times w0, then
U(-sqrt(6/n)/w0, sqrt(6/n)/w0)).
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "sine units with w0=30 (pre-activations +-30 rad), loss falls by orders of magnitude",
        "source": "Sitzmann et al. NeurIPS 2020 sec. 3.2", "arch": "SIREN MLP (3 sine layers), coordinate network"}


class SineLayer(nn.Module):
    def __init__(self, n_in, n_out, first):
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)
        bound = 1 / n_in if first else math.sqrt(6 / n_in) / 30
        nn.init.uniform_(self.linear.weight, -bound, bound)

    def forward(self, x):
        return torch.sin(30 * self.linear(x))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    t = torch.linspace(-1, 1, 512).unsqueeze(1)
    signal = 0.6 * torch.sin(14 * t) * torch.exp(-2 * t.abs()) + 0.3 * torch.sign(torch.sin(5 * t)) * (t > 0)
    model = nn.Sequential(SineLayer(1, 64, True), SineLayer(64, 64, False), SineLayer(64, 64, False), nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model, acts=("0", "1")) if probe else None
    for _ in range(250):
        opt.zero_grad()
        loss = (model(t) - signal).pow(2).mean()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.1)


if __name__ == "__main__":
    sys.exit(main(globals()))
