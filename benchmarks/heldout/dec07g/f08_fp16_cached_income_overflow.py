"""Tabular features cached as float16 to save space: an income column above 65504 becomes inf.

A quarter of the incomes exceed float16's largest finite value, so they are stored as inf; the
column is then standardised with its mean and std (inf), which makes the whole column NaN or -inf.
The first batch already carries them into the network, and the loss is NaN from step 0.
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "kind": ["data_anomaly", "nonfinite"],
    "layer": ["<input>"],
    "step": (0, 1),
    "bug": "features.astype(np.float16) before standardising: income > 65504 -> inf -> NaN column",
    "source": "float16 range overflow reports (e.g. pandas/numpy users 'astype(float16) gives inf'; "
              "hivebook 'Mixed precision training NaNs: fp16 overflow, max 65504'); Zhang et al. "
              "ISSTA 2018 numerical-error class",
    "arch": "tabular MLP credit-risk style binary classifier",
}


def dataset(n):
    rng = np.random.default_rng(0)
    income = rng.lognormal(mean=10.6, sigma=0.6, size=n)
    age = rng.uniform(20, 70, size=n)
    other = rng.normal(size=(n, 6))
    logit = 1.5 * (np.log(income) - 10.6) - 0.04 * (age - 45) + other[:, 0] - 0.5 * other[:, 1]
    y = (logit + rng.normal(scale=0.5, size=n) > 0).astype(np.float32)
    x = np.column_stack([income, age, other])
    return x, y


def train(fixed, writer, probe):
    torch.manual_seed(0)
    x, y = dataset(8192)
    with np.errstate(over="ignore"):
        x = x.astype(np.float32 if fixed else np.float16).astype(np.float64)
    if fixed:
        x[:, 0] = np.log(x[:, 0])
    with np.errstate(invalid="ignore", over="ignore"):
        x = (x - x.mean(0)) / x.std(0)
    x = torch.tensor(x, dtype=torch.float32)
    y = torch.tensor(y)[:, None]
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.BCEWithLogitsLoss()
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for step in range(150):
        sl = slice((step * 64) % 8192, (step * 64) % 8192 + 64)
        xb, yb = x[sl], y[sl]
        out = model(xb)
        loss = crit(out, yb)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss, bad_inputs=float((~torch.isfinite(xb)).float().mean()),
                   acc=float(((out > 0).float() == yb).float().mean()))
        opt.step()


def truth(bug, twin):
    first = next((i for i, r in enumerate(bug) if not math.isfinite(r["loss"])), None)
    bad = bug[0]["bad_inputs"]
    twin_ok = all(math.isfinite(r["loss"]) for r in twin) and twin[0]["bad_inputs"] == 0
    acc_t = mean([r["acc"] for r in twin[-20:]])
    held = first == 0 and bad > 0 and twin_ok and acc_t > 0.75
    return held, (f"bug loss non-finite from step {first}, non-finite input fraction at step 0 {bad:.3f}; "
                  f"twin finite {twin_ok}, acc {acc_t:.2f}")


if __name__ == "__main__":
    sys.exit(main(globals()))
