"""An MLP regressor with a ReLU after its output layer, on standardised (half negative) targets.

Bug: the output goes through ``nn.ReLU()`` although the targets are standardised: every negative
target is unreachable, and every sample whose output pre-activation is negative sends no gradient
back. The loss stays far above the twin's.
Source: https://math.techqa.club/are-relu-a-very-bad-choice-as-last-layer-for-regression-4483706
and https://stats.stackexchange.com/questions/362588 (ReLU output layer cannot output negatives);
Humbatova et al. ICSE 2020, 'Wrong type of activation function' (Model / Layers).
Fixed twin: no activation after the output layer.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, series  # noqa: E402

CASE = {
    "bug": "ReLU after the output layer of a regressor with standardised (half negative) targets",
    "source": "https://stats.stackexchange.com/questions/362588; Humbatova et al. ICSE 2020 (wrong activation)",
    "arch": "MLP regressor (3 hidden layers, ReLU), scalar standardised target",
    "kind": ["dead_activation", "loss_plateau"],
    "layer": ["out_act", "out", "<loss>"],
    "step": [0, 150],
}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    layers = [nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)]
    model = nn.Sequential(*layers, nn.Identity() if fixed else nn.ReLU())
    names = dict(zip(["fc1", "act1", "fc2", "act2", "out", "out_act"], model))
    model = nn.Sequential()
    for k, m in names.items():
        model.add_module(k, m)
    w = torch.randn(8, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("out_act",)) if probe else None
    for _ in range(200):
        x = torch.randn(128, 8, generator=g)
        y = (torch.sin(x @ w) + 0.3 * (x[:, 0] * x[:, 1])).unsqueeze(1)
        y = (y - y.mean()) / y.std()
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    zb = mean(series(bug, "act", "out_act", "zero"))
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = zb > 0.4 and lb > 3 * lt
    return held, f"out_act zero fraction bug {zb:.2f}; last-30 loss bug {lb:.3g} twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
