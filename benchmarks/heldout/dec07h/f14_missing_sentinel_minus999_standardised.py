"""Tabular regression where missing values are the sentinel -999.0 and then standardised with it.

Bug: three informative columns have ~15% missing entries stored as -999.0 (the Higgs-boson Kaggle
convention); the pipeline z-scores every column with its global mean and std, sentinel included.
The std of those columns becomes ~350, the real values are squeezed into a band ~0.003 wide, and
the sentinel rows sit 2.4 std away: the network cannot read the informative part of those columns
and the loss stays far above the twin's.
Source: https://www.kaggle.com/c/higgs-boson/data ("-999.0 ... outside the normal range of all
variables" marks missing values); Humbatova et al. ICSE 2020, 'Preprocessing of training data'
(missing / wrong preprocessing).
Fixed twin: the sentinel replaced by the column's mean of observed values (plus a missing flag)
before standardising.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "missing values left as -999.0 and z-scored with them: the informative columns are squeezed into a 0.003-wide band",
    "source": "https://www.kaggle.com/c/higgs-boson/data (-999.0 for missing); Humbatova et al. ICSE 2020 (wrong preprocessing)",
    "arch": "tabular MLP regressor (12 features, 2 hidden layers)",
    "kind": ["data_anomaly", "loss_plateau"],
    "layer": ["<input>", "<loss>"],
    "step": [0, 150],
}

N = 4096


def dataset(fixed):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N, 12, generator=g)
    y = (torch.sin(2 * x[:, 0]) + x[:, 1] * x[:, 2] + 0.5 * x[:, 3]).unsqueeze(1)
    miss = torch.rand(N, 3, generator=g) < 0.15
    cols = x[:, :3].clone()
    if fixed:
        obs_mean = torch.stack([cols[~miss[:, j], j].mean() for j in range(3)])
        cols = torch.where(miss, obs_mean, cols)
        feats = torch.cat([cols, x[:, 3:], miss.float()], 1)
    else:
        cols = torch.where(miss, torch.tensor(-999.0), cols)
        feats = torch.cat([cols, x[:, 3:], torch.zeros(N, 3)], 1)
    std = feats.std(0)
    feats = (feats - feats.mean(0)) / torch.where(std > 0, std, torch.ones_like(std))
    return feats, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    feats, y = dataset(fixed)
    model = nn.Sequential(nn.Linear(15, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(250):
        idx = torch.randint(0, N, (128,), generator=g)
        opt.zero_grad()
        loss = crit(model(feats[idx]), y[idx])
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    feats, _ = dataset(False)
    band = float(feats[:, 0][feats[:, 0] > -1].std())
    lb, lt = mean([r["loss"] for r in bug[-30:]]), mean([r["loss"] for r in twin[-30:]])
    held = band < 0.01 and lb > 2 * lt
    return held, f"bug column 0 observed values' std after scaling {band:.3g}; last-30 loss bug {lb:.3g} twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
