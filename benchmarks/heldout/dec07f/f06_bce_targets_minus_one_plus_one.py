"""A binary classifier trained with BCEWithLogitsLoss on labels in {-1, +1} (SVM / LIBSVM convention).

Bug: BCE expects targets in [0, 1]; nothing checks it. For y = -1 the loss is
log sigmoid(x) - 2 log(1 - sigmoid(x)), unbounded below as x -> -inf, with a gradient of at least
1 that never fades: the negatives' logits are pushed down forever, the loss falls below 0 (BCE's
floor) and keeps falling while the head's weights and outputs grow without bound (through the
ReLU layers the growth feeds itself: the run ends in overflow and NaN, a late consequence).
Source: https://www.codegenes.net/blog/pytorch-bce-below-0 (BCE below 0 from targets outside
[0, 1]); torch.nn.BCEWithLogitsLoss docs ("the targets should be numbers between 0 and 1").
Fixed twin: labels mapped to {0, 1} with (y + 1) / 2.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "BCEWithLogitsLoss on {-1, +1} labels: loss unbounded below, logits of the negatives driven to -inf",
    "source": "https://www.codegenes.net/blog/pytorch-bce-below-0; torch.nn.BCEWithLogitsLoss docs",
    "arch": "tabular MLP binary classifier",
    "kind": ["data_anomaly", "activation_explosion", "exploding_gradient"],
    "layer": ["<loss>", "<input>", "head"],
    "step": [0, 60],
}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential()
    model.add_module("fc1", nn.Linear(10, 64))
    model.add_module("act1", nn.ReLU())
    model.add_module("fc2", nn.Linear(64, 64))
    model.add_module("act2", nn.ReLU())
    model.add_module("head", nn.Linear(64, 1))
    w = torch.randn(10, generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    crit = nn.BCEWithLogitsLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("head",)) if probe else None
    for _ in range(200):
        x = torch.randn(128, 10, generator=g)
        y = torch.sign(x @ w)  # labels in {-1, +1}
        t = (y + 1) / 2 if fixed else y
        opt.zero_grad()
        loss = crit(model(x).squeeze(1), t)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    nan_at = next((i for i, r in enumerate(bug) if r["loss"] != r["loss"]), len(bug))
    neg = next((i for i, r in enumerate(bug) if r["loss"] < 0), None)
    lb = mean([r["loss"] for r in bug[40:56]])
    hb = mean([r["act"]["head"]["maxabs"] for r in bug[40:56]])
    ht = mean([r["act"]["head"]["maxabs"] for r in twin[40:56]])
    lt = mean([r["loss"] for r in twin[-20:]])
    held = neg is not None and neg <= 60 and lb < -1 and nan_at > 56 and hb > 10 * ht and 0 < lt < 0.4
    return held, (f"bug loss first below 0 at step {neg}, steps 40-55 {lb:.3g}; head max|out| steps 40-55 bug {hb:.3g} "
                  f"twin {ht:.3g}; twin last-20 loss {lt:.3g}; bug loss NaN from step {nan_at}")


if __name__ == "__main__":
    sys.exit(main(globals()))
