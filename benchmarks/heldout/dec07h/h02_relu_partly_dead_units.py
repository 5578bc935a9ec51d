"""A ReLU MLP in which about a third of the hidden units are dead from the start, and it learns fine.

Healthy, built to fool: the hidden layer's biases for 35% of the units start at -4 (as after an
aggressive earlier fine-tune); those units never fire and never get a gradient, the rest of the
layer learns the task. With the live units' ordinary sparsity, about two thirds of the layer's
outputs are exactly zero at every step.
Source: cs231n notes ("as much as 40% of your network can be dead ... if the learning rate is set
too high"; a fraction of dead units is common in trained ReLU nets), https://cs231n.github.io/neural-networks-1/
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "what": "ReLU layer with 35% units dead for the whole run (~65% zero outputs) while the rest learn",
        "source": "https://cs231n.github.io/neural-networks-1/ (dying ReLU: a fraction of dead units)",
        "arch": "MLP classifier (ReLU, 2 hidden layers)"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential()
    model.add_module("fc1", nn.Linear(20, 128))
    model.add_module("act1", nn.ReLU())
    model.add_module("fc2", nn.Linear(128, 64))
    model.add_module("act2", nn.ReLU())
    model.add_module("out", nn.Linear(64, 4))
    with torch.no_grad():
        model.fc1.bias[: int(0.35 * 128)] = -4.0
        model.fc1.weight[: int(0.35 * 128)] *= 0.2
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("act1",)) if probe else None
    w = torch.randn(20, 4, generator=g)
    for _ in range(200):
        x = torch.randn(128, 20, generator=g)
        y = (torch.tanh(x) @ w).argmax(1)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    ok, detail = loss_fell(bug, 0.3)
    zmax = max(r["act"]["act1"]["zero"] for r in bug)
    zmin = min(r["act"]["act1"]["zero"] for r in bug)
    return ok and zmin > 0.35 and zmax < 0.8, f"{detail}; act1 zero fraction {zmin:.2f}..{zmax:.2f} (35% dead units)"


if __name__ == "__main__":
    sys.exit(main(globals()))
