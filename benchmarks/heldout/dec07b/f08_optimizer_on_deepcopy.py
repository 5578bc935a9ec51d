"""A mixture-of-experts regressor deep-copied after its optimizer was built: the optimizer updates the
original, the copy that trains never changes.

Bug: ``opt = Adam(model.parameters())`` then ``model = copy.deepcopy(model)`` (here: a copy taken
to keep an untouched initial model, with the names swapped). The copy computes the loss and gets
gradients; the optimizer steps the parameters of the object no one uses.
Source: skorch-dev/skorch issue #317 "module weights don't update after copy.deepcopy"
(https://github.com/skorch-dev/skorch/issues/317); pytorch/pytorch issue #14467 (ask for a warning
when the optimizer's parameters are not the model's, https://github.com/pytorch/pytorch/issues/14467).
Fixed twin: the optimizer is built on the model that trains.
"""

import copy
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "model deep-copied after the optimizer was built: the optimizer steps the other copy",
    "source": "https://github.com/skorch-dev/skorch/issues/317; https://github.com/pytorch/pytorch/issues/14467",
    "arch": "soft mixture of 4 MLP experts with a linear gate",
    "kind": ["frozen_weights"],
    "layer": ["<optimizer>", "gate", "experts.*"],
    "step": [0, 5],
}


class MoE(nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.gate = nn.Linear(6, n)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 1)) for _ in range(n))

    def forward(self, x):
        w = torch.softmax(self.gate(x), -1)
        return (torch.cat([e(x) for e in self.experts], -1) * w).sum(-1, keepdim=True)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = MoE()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    if not fixed:
        initial = model
        model = copy.deepcopy(initial)  # meant: initial = copy.deepcopy(model)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randn(64, 6, generator=g)
        y = torch.where(x[:, :1] > 0, torch.sin(2 * x[:, 1:2]), x[:, 2:3] * x[:, 3:4])
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    mb = abs(bug[-1]["weight"]["gate"] - bug[0]["weight"]["gate"])
    mt = abs(twin[-1]["weight"]["gate"] - twin[0]["weight"]["gate"])
    gb = mean([r["grad"]["gate"] for r in bug])
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = mb == 0 and mt > 0.1 and gb > 0 and lb > 1.5 * lt
    return held, f"gate weight-norm change bug {mb:.3g} twin {mt:.3g}; bug gate grad mean {gb:.3g}; last-30 loss bug {lb:.3g} twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
