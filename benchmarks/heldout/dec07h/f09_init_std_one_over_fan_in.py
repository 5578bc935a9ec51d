"""A deep ReLU MLP initialised with std = 1/fan_in (instead of sqrt(2/fan_in)): the signal vanishes.

Bug: a hand-written init uses ``std = 1 / fan_in`` (variance 1/n^2, the "1/n" mistaken for the
variance rule): each of the 8 layers shrinks the activations ~16x, the output is a constant and
the first layers' gradients are ~1e-10 of the twin's. SGD learns nothing.
Source: https://cs231n.github.io/neural-networks-2/#init ("calibrating the variances with
1/sqrt(n)"); He et al. ICCV 2015 sec. 2.2; Humbatova et al. ICSE 2020, 'Wrong weights
initialisation'.
Fixed twin: ``std = sqrt(2 / fan_in)`` (He).
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "custom init std = 1/fan_in on an 8-layer ReLU MLP: activations shrink ~16x per layer, nothing learns",
    "source": "https://cs231n.github.io/neural-networks-2/#init; He et al. ICCV 2015 sec. 2.2; Humbatova et al. ICSE 2020 'Wrong weights initialisation'",
    "arch": "8-layer ReLU MLP (width 128), SGD momentum",
    "kind": ["vanishing_gradient", "activation_collapse", "loss_plateau"],
    "layer": ["layers.*", "<loss>"],
    "step": [0, 3],
}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    mods = []
    for i in range(8):
        lin = nn.Linear(32 if i == 0 else 128, 128)
        std = math.sqrt(2 / lin.in_features) if fixed else 1 / lin.in_features
        nn.init.normal_(lin.weight, 0, std)
        nn.init.zeros_(lin.bias)
        mods += [lin, nn.ReLU()]
    model = nn.Sequential()
    model.add_module("layers", nn.Sequential(*mods))
    model.add_module("head", nn.Linear(128, 5))
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    centers = 2 * torch.randn(5, 32, generator=g)
    for _ in range(200):
        y = torch.randint(0, 5, (128,), generator=g)
        x = centers[y] + torch.randn(128, 32, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    gb, gt = mean([r["grad"]["layers.0"] for r in bug[:10]]), mean([r["grad"]["layers.0"] for r in twin[:10]])
    lb, lt = mean([r["loss"] for r in bug[-20:]]), mean([r["loss"] for r in twin[-20:]])
    held = gb < 1e-4 * gt and lb > 1.5 and lt < 0.3
    return held, f"layers.0 grad steps 0-9 bug {gb:.2g} twin {gt:.2g}; last-20 loss bug {lb:.3g} (ln 5 = 1.61) twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
