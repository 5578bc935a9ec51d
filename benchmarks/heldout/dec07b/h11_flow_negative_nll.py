"""Healthy: a RealNVP-style flow on narrow 2-D data (std ~0.03): its NLL goes far below zero.

Fools: the loss is a negative log-density of continuous data, so it legitimately falls below 0
(to about -3.5 here) and keeps falling; the scale nets' outputs are large negative (strong
contraction) by design.
Source of the recipe: Dinh, Sohl-Dickstein & Bengio ICLR 2017 (Real NVP) eq. 3; SRFlow issue #12
and STG-NF issue #20 ("the loss is the negative log likelihood ... it can be negative",
https://github.com/orhir/STG-NF/issues/20).
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {"healthy": True, "fools": "negative and falling NLL (continuous density), large negative log-scales",
        "source": "Dinh et al. ICLR 2017 eq. 3; https://github.com/orhir/STG-NF/issues/20", "arch": "affine coupling flow (6 couplings, 2-D)"}


class Coupling(nn.Module):
    def __init__(self, flip):
        super().__init__()
        self.flip = flip
        self.net = nn.Sequential(nn.Linear(1, 64), nn.Tanh(), nn.Linear(64, 2))

    def forward(self, x):
        a, b = (x[:, 1:], x[:, :1]) if self.flip else (x[:, :1], x[:, 1:])
        s, t = self.net(a).chunk(2, 1)
        s = 3 * torch.tanh(s / 3)
        b = b * torch.exp(s) + t
        return (torch.cat([b, a], 1) if self.flip else torch.cat([a, b], 1)), s.squeeze(1)


class Flow(nn.Module):
    def __init__(self):
        super().__init__()
        self.couplings = nn.ModuleList(Coupling(i % 2 == 1) for i in range(6))

    def forward(self, x):
        logdet = torch.zeros(len(x))
        for c in self.couplings:
            x, s = c(x)
            logdet = logdet + s
        return x, logdet


def nll(out, _target=None):
    z, logdet = out
    return (0.5 * z.pow(2).sum(1) + math.log(2 * math.pi) - logdet).mean()


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Flow()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(250):
        t = torch.rand(128, generator=g) * 2 - 1
        x = torch.stack([t, 0.5 * t.pow(2)], 1) * 0.1 + 0.03 * torch.randn(128, 2, generator=g)
        opt.zero_grad()
        loss = nll(model(x))
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    l0, l1 = mean([r["loss"] for r in bug[:10]]), mean([r["loss"] for r in bug[-20:]])
    finite = all(r["loss"] == r["loss"] for r in bug)
    return finite and l1 < -1 and l1 < l0 - 1, f"loss first-10 {l0:.3g} -> last-20 {l1:.3g}; finite throughout {finite}"


if __name__ == "__main__":
    sys.exit(main(globals()))
