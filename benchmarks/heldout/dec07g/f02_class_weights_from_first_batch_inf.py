"""Class weights for an imbalanced CrossEntropyLoss computed as 1/count on the first batch only.

The rare class is absent from the first batch, so its weight is 1/0 = inf. Nothing happens until
the first batch that holds the rare class: there the weighted mean is inf/inf = NaN, the NaN
gradient goes into every weight, and the run is NaN from that step on.
"""
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

RARE_FIRST = 12  # the first batch that holds the rare class (built so)

CASE = {
    "kind": ["nonfinite"],
    "layer": ["<loss>"],
    "step": (RARE_FIRST, RARE_FIRST + 1),
    "bug": "weight = 1 / bincount(first batch labels): the rare class gets inf, NaN at its first batch",
    "source": "PyTorch forum threads 'CrossEntropyLoss weight gives nan' (class weights from "
              "inverse counts with a zero count); torch.nn.CrossEntropyLoss docs (weighted mean "
              "divides by the sum of the target weights)",
    "arch": "tabular MLP, 4 classes, one rare (3 %)",
}


def batches(n_steps, g):
    centers = torch.randn(4, 12, generator=torch.Generator().manual_seed(3)) * 2.0
    out = []
    for i in range(n_steps):
        if i < RARE_FIRST:
            y = torch.randint(0, 3, (32,), generator=g)
        else:
            y = torch.randint(0, 3, (32,), generator=g)
            rare = torch.rand(32, generator=g) < 0.06
            if i == RARE_FIRST:
                rare[0] = True
            y[rare] = 3
        out.append((centers[y] + torch.randn(32, 12, generator=g), y))
    return out


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    data = batches(200, g)
    if fixed:
        counts = torch.bincount(torch.cat([y for _, y in data]), minlength=4).float()
    else:
        counts = torch.bincount(data[0][1], minlength=4).float()
    weight = counts.sum() / (4 * counts)
    model = nn.Sequential(nn.Linear(12, 48), nn.ReLU(), nn.Linear(48, 48), nn.ReLU(), nn.Linear(48, 4))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss(weight=weight)
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for x, y in data:
        logits = model(x)
        loss = crit(logits, y)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss, acc=float((logits.argmax(1) == y).float().mean()))
        opt.step()


def truth(bug, twin):
    first = next((i for i, r in enumerate(bug) if not math.isfinite(r["loss"])), None)
    before_ok = all(math.isfinite(r["loss"]) for r in bug[:RARE_FIRST])
    twin_ok = all(math.isfinite(r["loss"]) for r in twin)
    acc_t = mean([r["acc"] for r in twin[-20:]])
    held = first == RARE_FIRST and before_ok and twin_ok and acc_t > 0.8
    return held, f"bug loss first non-finite at step {first} (expected {RARE_FIRST}); twin finite {twin_ok}, acc {acc_t:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
