"""A count regressor whose Linear output is read by PoissonNLLLoss(log_input=False) as the rate itself.

Bug: with ``log_input=False`` the loss is ``input - target * log(input + eps)``: the raw Linear
output is negative for about half the samples at init, log of a negative number is NaN, and the
mean loss is NaN from step 0 (silently: no check on the input's sign).
Source: https://github.com/pytorch/pytorch/issues/184030 (PoissonNLLLoss returns NaN for negative
input when log_input=False).
Fixed twin: the default ``log_input=True`` (the output is the log-rate).
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "PoissonNLLLoss(log_input=False) on a raw Linear output: log of negative rates, NaN loss from step 0",
    "source": "https://github.com/pytorch/pytorch/issues/184030",
    "arch": "MLP count regressor (Poisson)",
    "kind": ["nonfinite"],
    "layer": ["<loss>", "out"],
    "step": [0, 1],
}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential()
    model.add_module("fc1", nn.Linear(6, 32))
    model.add_module("act1", nn.Tanh())
    model.add_module("out", nn.Linear(32, 1))
    w = 0.4 * torch.randn(6, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    crit = nn.PoissonNLLLoss(log_input=fixed)
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        x = torch.randn(128, 6, generator=g)
        y = torch.poisson(torch.exp(0.5 + x @ w), generator=g)
        opt.zero_grad()
        loss = crit(model(x).squeeze(1), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    nan_steps = [i for i, r in enumerate(bug) if not math.isfinite(r["loss"])]
    tw_nan = sum(1 for r in twin if not math.isfinite(r["loss"]))
    l0, l1 = mean([r["loss"] for r in twin[:10]]), mean([r["loss"] for r in twin[-20:]])
    held = nan_steps[:1] == [0] and tw_nan == 0 and l1 < l0 - 0.3
    return held, (f"bug NaN loss first at {nan_steps[:1]}, on {len(nan_steps)}/{len(bug)} steps; "
                  f"twin NaN steps {tw_nan}, loss {l0:.3g} -> {l1:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
