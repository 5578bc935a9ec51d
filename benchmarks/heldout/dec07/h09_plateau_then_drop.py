"""Healthy: a deep linear network from a small init: a long loss plateau, then a sudden drop.

Fools: for ~35 steps the loss does not move and the gradients are small (a saddle near the
origin), which looks like a stalled run; then it falls by more than 10x.
Source of the recipe: Saxe, McClelland & Ganguli, "Exact solutions to the nonlinear dynamics of
learning in deep linear neural networks" (ICLR 2014), section 2 (plateaus from small init).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {"healthy": True, "fools": "a long plateau (saddle at small init) followed by a sharp drop",
        "source": "Saxe et al. ICLR 2014 sec. 2", "arch": "deep linear network (4 Linear layers)"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16))
    for m in model:
        nn.init.normal_(m.weight, std=0.1)
        nn.init.zeros_(m.bias)
    target = torch.randn(16, 16, generator=g) / 4
    opt = torch.optim.SGD(model.parameters(), lr=0.4)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(300):
        x = torch.randn(64, 16, generator=g)
        opt.zero_grad()
        loss = crit(model(x), x @ target)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    losses = [r["loss"] for r in bug]
    flat = losses[30] > 0.9 * losses[0]
    low = min(losses[-20:])
    return flat and low < 0.1 * losses[0], f"loss step 0 {losses[0]:.3g}, step 30 {losses[30]:.3g}, min last-20 {low:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
