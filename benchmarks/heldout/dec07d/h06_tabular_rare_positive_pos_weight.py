"""Healthy: a tabular fraud-style classifier with 2 % positives and BCEWithLogits(pos_weight=49).

Fools: the weighted loss starts at ~1.5, well above ln 2, and jumps whenever a batch
holds one or two more positives (each positive weighs 49 negatives); the logit bias drifts far
negative; heavy-tailed numeric columns (log-normal amounts) go in after a log1p, not a z-score.
Source of the recipe: PyTorch docs of BCEWithLogitsLoss pos_weight ("if a dataset contains 100
positive and 300 negative examples ... pos_weight should be 300/100",
https://pytorch.org/docs/stable/generated/torch.nn.BCEWithLogitsLoss.html).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "2 % positives with pos_weight 49: jumpy weighted loss; log1p heavy-tailed columns",
        "source": "PyTorch BCEWithLogitsLoss pos_weight docs", "arch": "tabular MLP (binary, imbalanced)"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 64), nn.SiLU(), nn.Linear(64, 32), nn.SiLU(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.BCEWithLogitsLoss(pos_weight=torch.tensor(49.0))
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(250):
        amount = torch.exp(1.5 * torch.randn(256, 2, generator=g) + 3)  # log-normal amounts
        other = torch.randn(256, 6, generator=g)
        score = 1.2 * other[:, 0] - other[:, 1] + 0.8 * (torch.log1p(amount[:, 0]) - 3) - 4.3
        y = (torch.rand(256, generator=g) < torch.sigmoid(2 * score)).float()
        x = torch.cat([torch.log1p(amount) - 3, other], 1)
        opt.zero_grad()
        loss = crit(model(x).squeeze(1), y)
        loss.backward()
        if p:
            p.step(loss, pos=float(y.mean()))
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.7, first=10, last=50)
    rate = sum(r["pos"] for r in bug) / len(bug)
    return fell and 0.005 < rate < 0.05, f"{said}; positive rate {rate:.3f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
