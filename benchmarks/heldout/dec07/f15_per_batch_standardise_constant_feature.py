"""A tabular MLP whose loop standardises each batch with its own statistics: a constant column is 0/0.

Bug: ``x = (x - x.mean(0)) / x.std(0)`` per batch; a rare binary flag is all-zero in some batches
(first at step 14 here), its std is 0, and 0/0 puts NaN into the input, then the loss and the weights.
Source: "Normalizing Data and Avoiding Dividing by Zero" (Data Science Stack Exchange question,
stored copy in huggingface.co/datasets/nvidia/Nemotron-CC-Math-v1): "I ended up dividing by 0 in
several features of the data which gave NaN"; Humbatova et al. ICSE 2020, Training > Preprocessing
of training data > "Wrong preprocessing".
Fixed twin: the dataset's own mean/std computed once, with an epsilon.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "per-batch standardisation divides a constant (all-zero) flag column by std 0: NaN input",
    "source": "Data Science SE 'Normalizing Data and Avoiding Dividing by Zero' (copy in nvidia/Nemotron-CC-Math-v1); Humbatova et al. ICSE 2020",
    "arch": "tabular MLP (binary classification, BCEWithLogits)",
    "kind": ["nonfinite", "data_anomaly"],
    "layer": ["<input>"],
    "step": [14, 15],
}


def dataset(g, n=64 * 200):
    x = torch.randn(n, 12, generator=g) * torch.linspace(0.5, 20, 12) + torch.linspace(-5, 100, 12)
    flag = torch.zeros(n)
    flag[torch.randperm(n, generator=g)[: n // 40]] = 1.0            # a rare binary flag
    x = torch.cat([x, flag.unsqueeze(1)], 1)
    y = ((x[:, 0] - 5 * x[:, 12] + 0.1 * x[:, 3]) > -4.5).float()
    return x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    x, y = dataset(g)
    mu, sd = x.mean(0), x.std(0) + 1e-6
    model = nn.Sequential(nn.Linear(13, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.BCEWithLogitsLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for step in range(200):
        xb, yb = x[step * 64:(step + 1) * 64], y[step * 64:(step + 1) * 64]
        if fixed:
            xb = (xb - mu) / sd
        else:
            xb = (xb - xb.mean(0)) / xb.std(0)
        opt.zero_grad()
        loss = crit(model(xb).squeeze(1), yb)
        loss.backward()
        if p:
            p.step(loss, input_finite=bool(torch.isfinite(xb).all()))
        opt.step()


def truth(bug, twin):
    first = next((i for i, r in enumerate(bug) if not r["input_finite"]), None)
    nan_loss = next((i for i, r in enumerate(bug) if r["loss"] != r["loss"]), None)
    twin_ok = all(r["input_finite"] and r["loss"] == r["loss"] for r in twin)
    held = first == 14 and nan_loss == 14 and twin_ok
    return held, f"bug input first non-finite at step {first}, loss NaN from {nan_loss}; twin finite throughout: {twin_ok}"


if __name__ == "__main__":
    sys.exit(main(globals()))
