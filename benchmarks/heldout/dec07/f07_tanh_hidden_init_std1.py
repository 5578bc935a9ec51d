"""A deep tanh MLP whose hidden layers are initialised N(0, 1) instead of ~1/sqrt(fan_in).

Bug: a copied "N(0,1) init" loop over the 256-wide hidden layers fc2..fc5: their pre-activations
have std ~16, the tanhs after them are saturated (|y| ~ 1), and the backward pass through the
large weights multiplies the gradient of fc1 by ~100; SGD with momentum then oscillates and the
loss rises.
Source: Glorot & Bengio, "Understanding the difficulty of training deep feedforward neural
networks" (AISTATS 2010), section 3 (saturation of tanh layers with badly scaled init);
Humbatova et al. ICSE 2020, Model > "Wrong weights initialisation".
Fixed twin: the hidden layers keep torch's default initialisation.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, ratio, series  # noqa: E402

CASE = {
    "bug": "hidden 256-wide tanh layers fc2..fc5 initialised N(0, 1): saturated from step 0, fc1 gradient x100",
    "source": "Glorot & Bengio AISTATS 2010 sec. 3; Humbatova et al. ICSE 2020 'Wrong weights initialisation'",
    "arch": "deep MLP (tanh, 5 hidden layers)",
    "kind": ["saturated_activation", "exploding_gradient"],
    "layer": ["fc2", "act2"],
    "step": [0, 2],
}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential()
    width = [32, 256, 256, 256, 256, 256]
    for i in range(5):
        model.add_module(f"fc{i + 1}", nn.Linear(width[i], width[i + 1]))
        model.add_module(f"act{i + 1}", nn.Tanh())
    model.add_module("out", nn.Linear(256, 1))
    if not fixed:
        for name in ("fc2", "fc3", "fc4", "fc5"):
            nn.init.normal_(getattr(model, name).weight, std=1.0)
    w = torch.randn(32, 1, generator=g) / 32 ** 0.5
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("act3", "act2")) if probe else None
    for _ in range(200):
        x = torch.randn(64, 32, generator=g)
        y = torch.sin(2 * (x @ w))
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    sat = mean(series(bug, "act", "act3", "sat99")), mean(series(twin, "act", "act3", "sat99"))
    b, t = mean([r["loss"] for r in bug[-20:]]), mean([r["loss"] for r in twin[-20:]])
    g = ratio(mean(series(bug, "grad", "fc1")), mean(series(twin, "grad", "fc1")))
    held = sat[0] > 0.5 and sat[1] < 0.01 and b > 2 * t and g > 30
    return held, f"act3 fraction |y|>=0.99 bug {sat[0]:.2f} twin {sat[1]:.3f}; fc1 grad bug/twin {g:.3g}; last-20 loss bug {b:.3g} twin {t:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
