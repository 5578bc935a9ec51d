"""Multi-label tagging with BCEWithLogitsLoss(reduction="sum") over 256 x 20 labels and a small lr.

Healthy, built to fool: the loss starts at ~3500 (the sum over 5120 label slots, far above any
per-sample scale), the gradients are hundreds of times the mean-reduction ones, and the SGD
learning rate is 2e-4 to match; it falls steadily.
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean, series  # noqa: E402

CASE = {"healthy": True, "arch": "MLP multi-label tagger, 20 labels, sum-reduced BCE, SGD lr 2e-4",
        "fools": "loss ~3500 at start, large raw gradients, small lr on purpose"}


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(40, 20, generator=torch.Generator().manual_seed(14))
    model = nn.Sequential(nn.Linear(40, 128), nn.ReLU(), nn.Linear(128, 20))
    opt = torch.optim.SGD(model.parameters(), lr=2e-4, momentum=0.9)
    crit = nn.BCEWithLogitsLoss(reduction="sum")
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("1",)) if probe else None
    for _ in range(200):
        x = torch.randn(256, 40, generator=g)
        y = (x @ w / 6.3 > 0.8).float()
        loss = crit(model(x), y)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    ok, detail = loss_fell(bug, 0.35)
    dead = mean(series(bug[-20:], "act", "1", "zero"))
    return ok and bug[0]["loss"] > 1000 and dead < 0.9, f"{detail}; step-0 loss {bug[0]['loss']:.4g}; ReLU zero fraction {dead:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
