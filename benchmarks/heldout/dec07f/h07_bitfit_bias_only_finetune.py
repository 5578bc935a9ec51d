"""Healthy: BitFit, fine-tuning only the biases of a pre-trained MLP (every weight matrix frozen).

Fools: each Linear has a frozen weight (no gradient, no update) next to a bias that trains, so
every layer looks half frozen; the loss starts above the pre-trained level on the shifted task
and falls back. The pre-training runs before ``watch()``.
Source of the recipe: Ben Zaken, Ravfogel & Goldberg ACL 2022 ("BitFit: simple parameter-efficient
fine-tuning"), sec. 2.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "every weight matrix frozen on purpose, only the biases train (BitFit)",
        "source": "Ben Zaken et al. ACL 2022 sec. 2", "arch": "MLP classifier, pre-trained then bias-only fine-tuned"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(16, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 5))
    proto = torch.randn(5, 16, generator=g)
    crit = nn.CrossEntropyLoss()
    pre = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(120):  # pre-training, not watched
        y = torch.randint(0, 5, (64,), generator=g)
        x = proto[y] + 1.0 * torch.randn(64, 16, generator=g)
        pre.zero_grad()
        crit(model(x), y).backward()
        pre.step()
    shift = 1.5 * torch.randn(16, generator=g)  # the fine-tuning domain: every input shifted
    for name, prm in model.named_parameters():
        prm.requires_grad_(name.endswith("bias"))
    opt = torch.optim.Adam([prm for prm in model.parameters() if prm.requires_grad], lr=1e-2)
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    w0 = model[2].weight.detach().clone()
    for _ in range(150):
        y = torch.randint(0, 5, (64,), generator=g)
        x = proto[y] + shift + 1.0 * torch.randn(64, 16, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss, wmoved=float((model[2].weight.detach() - w0).abs().max()))
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.6)
    return fell and bug[-1]["wmoved"] == 0.0, f"{said}; layer 2 weight max change {bug[-1]['wmoved']}"


if __name__ == "__main__":
    sys.exit(main(globals()))
