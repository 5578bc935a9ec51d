"""Healthy: a Siamese embedding trained with a margin contrastive loss that the easy pairs satisfy.

Fools: once similar pairs are close and dissimilar ones beyond the margin, most pairs contribute
exactly zero loss and zero gradient (hinge): late in the run the loss is ~0 and the gradients
are orders of magnitude below their start, because the task is solved.
Source of the recipe: Hadsell, Chopra & LeCun CVPR 2006 eq. 4 (contrastive loss with margin).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {"healthy": True, "fools": "hinge satisfied: loss ~0 and gradients orders of magnitude below their start late in the run",
        "source": "Hadsell, Chopra & LeCun CVPR 2006 eq. 4", "arch": "Siamese MLP encoder with margin contrastive loss"}


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 8))

    def forward(self, a, b):
        return self.encoder(a), self.encoder(b)


def contrastive(out, same, margin=2.0):
    ea, eb = out
    d = (ea - eb).pow(2).sum(1).add(1e-9).sqrt()
    return (same * d.pow(2) + (1 - same) * torch.clamp(margin - d, min=0).pow(2)).mean()


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randn(6, 10, generator=g) * 0.5
    model = Pair()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    if writer:
        writer.watch(model, optimizer=opt)  # a function loss: recorded below
    p = probe(model) if probe else None
    for _ in range(200):
        i = torch.randint(0, 6, (64,), generator=g)
        same = (torch.rand(64, generator=g) < 0.5).float()
        j = torch.where(same > 0, i, (i + torch.randint(1, 6, (64,), generator=g)) % 6)
        a = ids[i] + 0.05 * torch.randn(64, 10, generator=g)
        b = ids[j] + 0.05 * torch.randn(64, 10, generator=g)
        opt.zero_grad()
        loss = contrastive(model(a, b), same)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    l0, l1 = mean([r["loss"] for r in bug[:10]]), mean([r["loss"] for r in bug[-20:]])
    g0 = mean([r["grad"]["encoder.0"] for r in bug[:10]])
    g1 = mean([r["grad"]["encoder.0"] for r in bug[-20:]])
    return l1 < 0.05 * l0 and g1 < 0.1 * g0, f"loss first-10 {l0:.3g} -> last-20 {l1:.3g}; encoder.0 grad {g0:.3g} -> {g1:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
