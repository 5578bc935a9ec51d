"""Healthy: speech enhancement by mask estimation: a GRU predicts an ideal binary mask through a sigmoid.

Fools: the targets are exactly 0 or 1 (the ideal binary mask of each time-frequency bin), so the
sigmoid outputs legitimately run to 0 and 1 and stay saturated for most bins; the inputs are log
magnitudes (negative, unnormalised, about -10 to 3); the loss falls to a floor set by ambiguous bins.
Source of the recipe: Wang, "On ideal binary mask as the computational goal of auditory scene
analysis" (2005); Weninger et al. 2015 (LSTM mask estimation for speech enhancement).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "sigmoid mask outputs saturate at 0/1 on binary targets; raw negative log-magnitude inputs",
        "source": "Wang 2005 (ideal binary mask); Weninger et al. 2015", "arch": "GRU + linear + sigmoid mask estimator (24 bins)"}


class MaskNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(24, 48, batch_first=True)
        self.out = nn.Linear(48, 24)
        self.mask = nn.Sigmoid()

    def forward(self, x):
        return self.mask(self.out(self.gru(x)[0]))


def _batch(g, n):
    f = torch.arange(24).float()
    pitch = 2 + torch.rand(n, 1, 1, generator=g) * 3
    on = (torch.rand(n, 30, 1, generator=g) < 0.6).float()
    speech = on * torch.exp(-((f % pitch) - pitch / 2).abs()) * torch.exp(-f / 10) * 4 * torch.rand(n, 30, 1, generator=g)
    noise = torch.rand(n, 30, 24, generator=g) * 0.8
    target = (speech > noise).float()
    return torch.log(speech + noise + 1e-4), target


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = MaskNet()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    crit = nn.BCELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("mask",)) if probe else None
    for _ in range(160):
        x, t = _batch(g, 32)
        opt.zero_grad()
        loss = crit(model(x), t)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.6)
    sat = bug[-1]["act"]["mask"]
    return fell, f"{said}; mask output std at the end {sat['std']:.3f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
