"""Healthy: a 6-layer highway MLP whose transform gates start nearly closed (bias -3), on purpose.

Srivastava, Greff & Schmidhuber (2015) initialise the gate bias negative so each layer starts by
carrying its input: every gate's sigmoid sits at ~0.05 at the start, the transform paths pass
little signal and gradient, and the gates open as the network learns. Trains normally.
Source: Srivastava, Greff & Schmidhuber, "Training Very Deep Networks", NeurIPS 2015, sec. 2.2 /
4.1 (negative transform-gate bias, e.g. -1 to -3).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {
    "healthy": True,
    "bug": "highway gates biased to -3: sigmoid gates ~0.05 at the start, transform paths nearly shut",
    "source": "Srivastava, Greff & Schmidhuber NeurIPS 2015 sec. 2.2",
    "arch": "highway MLP (6 highway layers, width 32), 4 classes",
}


class Highway(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.transform = nn.Linear(d, d)
        self.act = nn.ReLU()
        self.gate = nn.Linear(d, d)
        self.gate_act = nn.Sigmoid()
        nn.init.constant_(self.gate.bias, -3.0)

    def forward(self, x):
        t = self.gate_act(self.gate(x))
        return t * self.act(self.transform(x)) + (1 - t) * x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16, 32)
        self.layers = nn.Sequential(*[Highway(32) for _ in range(6)])
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.layers(self.inp(x)))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    centers = torch.randn(4, 16, generator=g)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("layers.0.gate_act", "layers.5.gate_act")) if probe else None
    for _ in range(200):
        y = torch.randint(0, 4, (64,), generator=g)
        x = centers[y] + 0.8 * torch.randn(64, 16, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, detail = loss_fell(bug, 0.2)
    g0 = bug[0]["act"]["layers.0.gate_act"]["maxabs"]
    held = fell and g0 < 0.3
    return held, f"{detail}; gate max at step 0 {g0:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
