"""A tabular MLP predicting house prices in dollars: raw targets ~2e5 with MSE and SGD.

Bug: the inputs are standardised but the targets are not (prices ~1e5-5e5): the first MSE is
~5e10, its gradient on the output layer ~1e5, and SGD with a normal rate diverges within a few
steps.
Source: Humbatova et al. ICSE 2020, 'Missing normalisation of the data' (Training data quality);
Zhang et al. ISSTA 2018 (unnormalised data leading to NaN); the task is the classic house-price
regression (scikit-learn California housing, whose target is in 100k USD units for this reason).
Fixed twin: targets standardised (and un-standardised for reporting).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "regression targets left in dollars (~2e5) with MSE and SGD: divergence in a few steps",
    "source": "Humbatova et al. ICSE 2020 (missing normalisation); Zhang et al. ISSTA 2018",
    "arch": "tabular MLP regressor (8 features, 2 hidden layers)",
    "kind": ["exploding_gradient", "nonfinite", "loss_spike", "initial_loss", "data_anomaly"],
    "layer": ["<loss>", "out"],
    "step": [0, 3],
}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential()
    for k, m in [("fc1", nn.Linear(8, 64)), ("act1", nn.ReLU()), ("fc2", nn.Linear(64, 64)), ("act2", nn.ReLU()),
                 ("out", nn.Linear(64, 1))]:
        model.add_module(k, m)
    w = torch.randn(8, 1, generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        x = torch.randn(64, 8, generator=g)
        price = 2.2e5 + 8e4 * torch.tanh(x @ w) + 1e4 * torch.randn(64, 1, generator=g)
        y = (price - 2.2e5) / 8e4 if fixed else price
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss, rel=float(loss.detach()) / float(y.var()))
        opt.step()


def truth(bug, twin):
    first_bad = next((i for i, r in enumerate(bug) if not r["loss"] < 1e3 * bug[0]["loss"]), None)
    gr = bug[0]["grad"]["out"] / twin[0]["grad"]["out"]
    rel_t = twin[-1]["rel"]
    held = first_bad is not None and first_bad <= 3 and gr > 1e4 and rel_t < 0.5
    return held, (f"bug loss step 0 {bug[0]['loss']:.3g}, > 1e3x that (or NaN) at step {first_bad}; "
                  f"step 0 out grad bug/twin {gr:.3g}; twin relative MSE at the end {rel_t:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
