"""A tabular regression MLP trained on a table whose numeric column has a few missing values.

Bug: the CSV's missing entries arrive as NaN (pandas reads an empty cell as NaN) and go into the
tensors without imputation; about 0.4 % of the rows carry one. The first batch that holds such a
row (step 31 here) gives a NaN prediction, a NaN loss and NaN gradients, and the SGD step writes
NaN into every weight: from then on the run is NaN.
Source: https://stackoverflow.com/questions/37232782/nan-loss-when-training-regression-network
(answers: check the input data for NaN); Zhang et al., "An Empirical Study on TensorFlow Program
Bugs", ISSTA 2018 (NaN from unchecked input data).
Fixed twin: missing values imputed with the column mean (computed over the observed values).
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "missing values left as NaN in a numeric column of the table (no imputation)",
    "source": "https://stackoverflow.com/questions/37232782/nan-loss-when-training-regression-network",
    "arch": "tabular MLP regressor (10 numeric columns)",
    "kind": ["nonfinite", "data_anomaly"],
    "layer": ["<input>", "net.0", "<loss>"],
    "step": [31, 33],
}

N, F, B = 6400, 10, 32


def table(g):
    x = torch.randn(N, F, generator=g)
    w = torch.randn(F, generator=g)
    y = x @ w + 0.5 * torch.tanh(x[:, 0] * x[:, 1]) + 0.1 * torch.randn(N, generator=g)
    missing = torch.rand(N, generator=g) < 0.004
    missing[: 31 * B] = False  # the first missing row of the (unshuffled) epoch lands in batch 31
    missing[31 * B + 5] = True
    x[missing, 3] = float("nan")
    return x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x, y = table(g)
    if fixed:
        col = x[:, 3]
        col[col.isnan()] = col[~col.isnan()].mean()
    model = nn.Module()
    model.net = nn.Sequential(nn.Linear(F, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for i in range(200):
        xb, yb = x[i * B:(i + 1) * B], y[i * B:(i + 1) * B]
        opt.zero_grad()
        loss = crit(model.net(xb).squeeze(1), yb)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    first = next((i for i, r in enumerate(bug) if not math.isfinite(r["loss"])), None)
    stays = all(not math.isfinite(r["loss"]) for r in bug[first:]) if first is not None else False
    twin_finite = all(math.isfinite(r["loss"]) for r in twin)
    lt0, lt1 = mean([r["loss"] for r in twin[:10]]), mean([r["loss"] for r in twin[-30:]])
    held = first == 31 and stays and twin_finite and lt1 < 0.3 * lt0
    return held, (f"bug loss first NaN at step {first}, NaN after: {stays}; "
                  f"twin finite {twin_finite}, {lt0:.3g} -> {lt1:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
