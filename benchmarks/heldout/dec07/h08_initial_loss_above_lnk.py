"""Healthy: a default-initialised CNN classifier whose loss starts well above ln K, then trains.

Fools: the inputs have std ~20 (prototype images plus noise, not rescaled), so the default-init
logits are already spread: the first loss is above ln 10 = 2.30, which by the contract is at
most a warning, and it falls quickly.
Adam keeps the first, large gradient from killing the ReLUs (checked: no ReLU layer above 85 %
zeros). Source of the recipe: torch default initialisation (kaiming_uniform with a=sqrt(5)) of a plain
Conv/Linear classifier; DESIGN.md "Severity and status" (loss above ln K at init is a warning).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, series  # noqa: E402

CASE = {"healthy": True, "fools": "first loss above ln K with default init, then normal training",
        "source": "torch default init; contract: initial loss above ln K is a warning", "arch": "CNN classifier, 10 classes"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 10))
    proto = torch.randn(10, 1, 8, 8, generator=g) * 2
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("1", "3")) if probe else None
    for _ in range(200):
        y = torch.randint(0, 10, (32,), generator=g)
        x = 10 * (proto[y] + torch.randn(32, 1, 8, 8, generator=g))
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    first, b = bug[0]["loss"], mean([r["loss"] for r in bug[-20:]])
    zero = max(max(series(bug, "act", name, "zero")) for name in ("1", "3"))
    held = first > 2.4 and b < 0.3 * first and zero < 0.85
    return held, f"first loss {first:.3g} (ln 10 = 2.303) -> last-20 {b:.3g}; max ReLU zero fraction {zero:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
