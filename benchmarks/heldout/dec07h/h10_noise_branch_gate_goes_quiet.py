"""A model with a learned scalar gate on an uninformative branch: the gate closes and the branch goes quiet.

Healthy, built to fool: a side branch reads a sensor that carries only noise; its output is scaled
by a learned gate (init 1) under weight decay. Training shrinks the gate and the branch's last
layer, so the gated output's spread falls ~40x while the main path learns: a layer whose output
collapses by design.
Source: Bachlechner et al. 2020 "ReZero is all you need" (learned residual gates);
Loshchilov & Hutter ICLR 2019 (AdamW decoupled weight decay).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "what": "a gated side branch on a noise-only sensor: its gated output shrinks ~40x by design",
        "source": "Bachlechner et al. 2020 (ReZero gates); Loshchilov & Hutter ICLR 2019 (AdamW)",
        "arch": "two-branch MLP regressor with a learned scalar gate (AdamW)"}


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.g = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return self.g * x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
        self.side = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
        self.gate = Gate()

    def forward(self, x, s):
        return self.main(x) + self.gate(self.side(s))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("gate",)) if probe else None
    w = torch.randn(8, 1, generator=g)
    for _ in range(250):
        x = torch.randn(128, 8, generator=g)
        s = 3 * torch.randn(128, 8, generator=g)  # noise-only sensor
        y = torch.sin(x @ w)
        opt.zero_grad()
        loss = crit(model(x, s), y)
        loss.backward()
        if p:
            p.step(loss, gate=float(model.gate.g.detach().abs()))
        opt.step()


def truth(bug, twin):
    ok, detail = loss_fell(bug, 0.2)
    g0, g1 = bug[0]["gate"], bug[-1]["gate"]
    s0, s1 = bug[0]["act"]["gate"]["std"], bug[-1]["act"]["gate"]["std"]
    return ok and g1 < g0 and s1 < 0.05 * s0, f"{detail}; |gate| {g0:.3g} -> {g1:.3g}; gate output std {s0:.3g} -> {s1:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
