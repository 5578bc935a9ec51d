"""Healthy: a tabular model on integer categorical columns (cardinality 5 to 2000) plus numeric ones.

Fools: the inputs are integer ids, not floats; the 2000-row embedding has most rows untouched on
any step (zero gradient rows), the rare categories get updated seldom, and the numeric columns are
small floats next to them.
Source of the recipe: entity embeddings of categorical variables, Guo & Berkhahn 2016
(arXiv:1604.06737) sec. 3; fastai TabularModel (embeddings for categorical columns).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "integer categorical inputs; a 2000-row embedding with most rows idle each step",
        "source": "Guo & Berkhahn 2016 arXiv:1604.06737 sec. 3", "arch": "categorical embeddings + MLP (binary)"}

CARD = (5, 50, 2000, 12)


class Tab(nn.Module):
    def __init__(self):
        super().__init__()
        self.embs = nn.ModuleList(nn.Embedding(c, 8) for c in CARD)
        self.mlp = nn.Sequential(nn.Linear(8 * len(CARD) + 3, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, cat, num):
        return self.mlp(torch.cat([e(cat[:, i]) for i, e in enumerate(self.embs)] + [num], 1)).squeeze(1)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    effects = [torch.randn(c, generator=g) for c in CARD]
    model = Tab()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.BCEWithLogitsLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        cat = torch.stack([torch.randint(0, c, (128,), generator=g) for c in CARD], 1)
        num = torch.randn(128, 3, generator=g)
        logit = sum(effects[i][cat[:, i]] for i in (0, 1, 3)) + 0.5 * num[:, 0]
        y = (logit + 0.3 * torch.randn(128, generator=g) > 0).float()
        opt.zero_grad()
        loss = crit(model(cat, num), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.6)
    return fell, said


if __name__ == "__main__":
    sys.exit(main(globals()))
