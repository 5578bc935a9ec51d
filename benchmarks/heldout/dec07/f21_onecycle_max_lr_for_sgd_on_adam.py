"""An MLP trained with Adam under OneCycleLR whose max_lr was copied from an SGD recipe (1.0).

Bug: ``OneCycleLR(adam, max_lr=1.0)``, a value meant for SGD with momentum; Adam's step is about
lr per weight, and OneCycle's first rate is already max_lr / 25 = 0.04: within the first ~6
steps the second hidden ReLU layer is pushed off the data and dies (zero fraction 0.5 -> 1.0),
and the loss never recovers.
Source: the OneCycleLR docs example uses ``SGD(lr=0.1, momentum=0.9)`` with ``max_lr=0.01``
(https://pytorch.org/docs/stable/generated/torch.optim.lr_scheduler.OneCycleLR.html); dying ReLU
from too-high learning rates (CS231n notes, "Leaky ReLU / dying ReLU",
https://cs231n.github.io/neural-networks-1/#actfun); Humbatova et al. ICSE 2020, "Suboptimal
learning rate".
Fixed twin: ``max_lr=3e-3`` for Adam.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, series  # noqa: E402

CASE = {
    "bug": "OneCycleLR max_lr=1.0 (an SGD value) on Adam: ReLUs die as the rate warms up",
    "source": "https://pytorch.org/docs/stable/generated/torch.optim.lr_scheduler.OneCycleLR.html; https://cs231n.github.io/neural-networks-1/#actfun",
    "arch": "MLP regressor (ReLU), Adam + OneCycleLR",
    "kind": ["dead_activation", "exploding_gradient", "loss_spike", "activation_explosion"],
    "layer": ["<optimizer>", "fc2", "act2"],
    "step": [0, 12],
}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential()
    model.add_module("fc1", nn.Linear(8, 128))
    model.add_module("act1", nn.ReLU())
    model.add_module("fc2", nn.Linear(128, 128))
    model.add_module("act2", nn.ReLU())
    model.add_module("out", nn.Linear(128, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3 if fixed else 1.0, total_steps=200)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("act1", "act2")) if probe else None
    w = torch.randn(8, generator=g)
    for _ in range(200):
        x = torch.randn(64, 8, generator=g)
        y = (torch.sin(x @ w) + 0.5 * x[:, 0].abs()).unsqueeze(1)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss, lr=opt.param_groups[0]["lr"])
        opt.step()
        sched.step()


def truth(bug, twin):
    dead_b = mean(series(bug[-50:], "act", "act2", "zero"))
    dead_t = mean(series(twin[-50:], "act", "act2", "zero"))
    b, t = mean([r["loss"] for r in bug[-30:]]), mean([r["loss"] for r in twin[-30:]])
    held = dead_b > 0.95 and dead_t < 0.8 and (b != b or b > 3 * t)
    return held, f"act2 zero fraction last 50 steps bug {dead_b:.2f} twin {dead_t:.2f}; last-30 loss bug {b:.3g} twin {t:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
