"""An MLP whose init function zeroes every parameter, not only the biases: a dead network.

Bug: ``model.apply(init)`` runs ``nn.init.zeros_`` on every parameter of a Linear where only the
bias was meant. The first hidden layer outputs ReLU(0) = 0 for every input, every weight gradient
is exactly 0, and only the output bias ever learns.
Source: Humbatova et al., "Taxonomy of Real Faults in Deep Learning Systems" (ICSE 2020), Model >
"Wrong weights initialisation"; Zhang et al., "An Empirical Study on TensorFlow Program Bugs"
(ISSTA 2018), incorrect model parameter; CS231n notes "Pitfall: all zero initialization"
(https://cs231n.github.io/neural-networks-2/#init).
Fixed twin: the init zeroes the biases and keeps torch's default weights.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, series  # noqa: E402

CASE = {
    "bug": "init zeroes every Linear parameter (meant the biases): hidden ReLUs output 0 forever",
    "source": "Humbatova et al. ICSE 2020, Model 'Wrong weights initialisation'; Zhang et al. ISSTA 2018",
    "arch": "MLP classifier (ReLU)",
    "kind": ["dead_activation", "no_gradient", "vanishing_gradient", "frozen_weights"],
    "layer": ["fc1", "act1"],
    "step": [0, 2],
}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential()
    model.add_module("fc1", nn.Linear(20, 64))
    model.add_module("act1", nn.ReLU())
    model.add_module("fc2", nn.Linear(64, 64))
    model.add_module("act2", nn.ReLU())
    model.add_module("out", nn.Linear(64, 5))

    def init(m):
        if isinstance(m, nn.Linear):
            for param in ([m.bias] if fixed else m.parameters()):
                nn.init.zeros_(param)
    model.apply(init)
    w = torch.randn(20, 5, generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("act1", "act2")) if probe else None
    for _ in range(200):
        x = torch.randn(64, 20, generator=g)
        y = (x @ w).argmax(1)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    z = mean(series(bug, "act", "act1", "zero"))
    zt = mean(series(twin, "act", "act1", "zero"))
    g = max(series(bug, "grad", "fc1"))
    gt = mean(series(twin, "grad", "fc1"))
    held = z == 1.0 and g == 0.0 and zt < 0.7 and gt > 1e-3 and bug[-1]["loss"] > 2 * twin[-1]["loss"]
    return held, f"act1 zero fraction bug {z:.2f} twin {zt:.2f}; fc1 grad max bug {g:.2g} mean twin {gt:.2g}; final loss bug {bug[-1]['loss']:.3g} twin {twin[-1]['loss']:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
