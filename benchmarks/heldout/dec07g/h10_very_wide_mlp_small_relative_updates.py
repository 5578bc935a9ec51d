"""A one-hidden-layer ReLU MLP 8192 units wide, trained by plain SGD at lr 0.02.

Healthy, built to fool: the hidden weight matrix is so large that each step moves it by ~1e-5 of
its norm after the first steps (update ratios ~2e-5, as in a nearly frozen layer), the per-unit
gradients are small (1/width), and half the hidden units are inactive on any given input. The loss still falls steadily.
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean, series  # noqa: E402

CASE = {"healthy": True, "arch": "MLP 32 -> 8192 -> 5, plain SGD",
        "fools": "very wide, tiny relative updates of the hidden layer, small per-unit gradients"}


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    protos = torch.randn(5, 32, generator=torch.Generator().manual_seed(17))
    model = nn.Sequential(nn.Linear(32, 8192), nn.ReLU(), nn.Linear(8192, 5))
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    crit = nn.CrossEntropyLoss()
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("1",)) if probe else None
    for _ in range(150):
        y = torch.randint(0, 5, (64,), generator=g)
        x = protos[y] + 1.2 * torch.randn(64, 32, generator=g)
        logits = model(x)
        loss = crit(logits, y)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss, acc=float((logits.argmax(1) == y).float().mean()))
        opt.step()


def truth(bug, twin):
    ok, detail = loss_fell(bug, 0.6)
    acc = mean([r["acc"] for r in bug[-20:]])
    dead = mean(series(bug[-20:], "act", "1", "zero"))
    return ok and acc > 0.8 and dead < 0.9, f"{detail}; acc last-20 {acc:.2f}; ReLU zero fraction {dead:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
