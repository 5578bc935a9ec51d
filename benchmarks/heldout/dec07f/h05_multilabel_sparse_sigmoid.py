"""Healthy: a 48-tag multi-label classifier with two positive tags per sample (BCEWithLogits).

Fools: most outputs are a confident "no": by the end about 80 % of the sigmoids sit below 0.05
(46 of 48 targets are 0 per sample), the loss is small early because most targets are 0, and it
keeps falling as the rare positives are learned.
Source of the recipe: the multi-label setup of torch.nn.MultiLabelSoftMarginLoss / BCEWithLogitsLoss
docs; Liu et al. SIGIR 2017 (extreme multi-label text classification) sec. 3.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "sigmoid outputs pinned near 0 for most tags (sparse multi-label targets)",
        "source": "torch.nn.BCEWithLogitsLoss docs; Liu et al. SIGIR 2017", "arch": "MLP multi-label tagger (48 sigmoid outputs)"}

T = 48


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, T))
    tag_vec = torch.randn(T, 32, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.BCEWithLogitsLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("4",)) if probe else None
    for _ in range(150):
        tags = torch.stack([torch.randperm(T, generator=g)[:2] for _ in range(64)])
        y = torch.zeros(64, T).scatter_(1, tags, 1.0)
        x = y @ tag_vec / 2 + 0.3 * torch.randn(64, 32, generator=g)
        opt.zero_grad()
        out = model(x)
        loss = crit(out, y)
        loss.backward()
        if p:
            p.step(loss, low=float((torch.sigmoid(out.detach()) < 0.05).float().mean()))
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.3)
    low = sum(r["low"] for r in bug[-20:]) / 20
    return fell and low > 0.75, f"{said}; fraction of outputs with sigmoid < 0.05, last 20 steps {low:.3f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
