"""Healthy: an MLP with BatchNorm after every Linear trained by plain SGD at lr 5.0.

Fools: a rate that would blow up an unnormalised net; the BatchNorm'd weights are scale-invariant,
so each large step mostly grows their norm (the BN and head parameters use lr 0.05), which in turn shrinks the effective rate: weight norms
about double and gradient norms fall while the loss falls normally.
Source of the recipe: Arora, Li & Lyu ICLR 2019 ("Theoretical analysis of auto rate-tuning by batch
normalization"), sec. 2; Ioffe & Szegedy ICML 2015.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "SGD lr 5.0 on a BatchNorm'd MLP: weight norms double, grads shrink, loss falls",
        "source": "Arora, Li & Lyu ICLR 2019 sec. 2", "arch": "MLP classifier, BatchNorm1d after each Linear"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential()
    prev = 16
    for i in range(3):
        model.add_module(f"fc{i}", nn.Linear(prev, 64, bias=False))
        model.add_module(f"bn{i}", nn.BatchNorm1d(64))
        model.add_module(f"act{i}", nn.ReLU())
        prev = 64
    model.add_module("head", nn.Linear(64, 5))
    proto = torch.randn(5, 16, generator=g)
    opt = torch.optim.SGD([{"params": [p for n, p in model.named_parameters() if n.startswith("fc")], "lr": 5.0},
                           {"params": [p for n, p in model.named_parameters() if not n.startswith("fc")], "lr": 0.05}])
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("act0", "act1", "act2")) if probe else None
    for _ in range(150):
        y = torch.randint(0, 5, (128,), generator=g)
        x = proto[y] + 1.0 * torch.randn(128, 16, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.5)
    grow = bug[-1]["weight"]["fc1"] / bug[0]["weight"]["fc1"]
    dead = max(r["act"][a]["zero"] for r in bug[-10:] for a in ("act0", "act1", "act2"))
    return fell and grow > 1.5 and dead < 0.8, f"{said}; fc1 weight norm x{grow:.3g} over the run; max ReLU zero fraction {dead:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
