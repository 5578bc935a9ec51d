"""Hashed sparse logistic regression (16384 buckets, 20 active) trained by Adagrad at lr 0.2.

Healthy, built to fool: a learning rate 20x Adagrad's default 0.01 on purpose (Adagrad's per-coordinate
denominators make it right for sparse features), gradients that are zero for >99 % of the rows
at every step, weights that start at exactly zero, and a noisy loss. It learns.
"""
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {"healthy": True, "arch": "EmbeddingBag(16384, 1, sum) + bias, Adagrad lr 0.2",
        "fools": "huge lr on purpose, sparse gradients, zero-initialised weights, noisy loss"}


class HashedLogReg(nn.Module):
    def __init__(self, n=16384):
        super().__init__()
        self.weights = nn.EmbeddingBag(n, 1, mode="sum")
        nn.init.zeros_(self.weights.weight)
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, idx):
        return self.weights(idx).squeeze(1) + self.bias


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    true_w = torch.randn(16384, generator=torch.Generator().manual_seed(11)) * 0.8
    model = HashedLogReg()
    opt = torch.optim.Adagrad(model.parameters(), lr=0.2)
    crit = nn.BCEWithLogitsLoss()
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    pool = torch.randint(0, 16384, (600,), generator=torch.Generator().manual_seed(12))
    for _ in range(250):
        idx = pool[torch.randint(0, 600, (128, 20), generator=g)]
        y = torch.bernoulli(torch.sigmoid(true_w[idx].sum(1) / 2), generator=g)
        out = model(idx)
        loss = crit(out, y)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss, acc=float(((out > 0).float() == y).float().mean()))
        opt.step()


def truth(bug, twin):
    # The labels are Bernoulli draws (Bayes loss ~0.45): the check is against ln 2, the loss of
    # the zero-initialised start.
    last = mean([r["loss"] for r in bug[-30:]])
    acc = mean([r["acc"] for r in bug[-30:]])
    return last < 0.8 * math.log(2) and acc > 0.72, f"loss step 0 {bug[0]['loss']:.3f} -> last-30 {last:.3f}; acc last-30 {acc:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
