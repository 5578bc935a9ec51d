"""A Siamese MLP whose Euclidean distance is ``((a - b) ** 2).sum(1).sqrt()``: NaN gradient on identical pairs.

Bug: a batch holds a pair of identical inputs (a duplicated sample, from step 25 on): its distance
is exactly 0, forward is finite, but d sqrt(u)/du at 0 is inf and ``inf * 0`` gives a NaN gradient
that reaches every encoder weight. ``torch.norm`` has had a zero subgradient since PR #2775; the
hand-written sqrt does not.
Source: pytorch/pytorch issue #2421 "Gradient of zero norm is nan"
(https://github.com/pytorch/pytorch/issues/2421) and PR #2775 ("at 0 it is now different to use
.norm() or .pow(2).sum().sqrt() ... the second one NaN").
Fixed twin: ``torch.linalg.vector_norm(a - b, dim=1)``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "distance as pow(2).sum().sqrt(): an identical pair gives a NaN gradient (forward finite)",
    "source": "https://github.com/pytorch/pytorch/issues/2421; https://github.com/pytorch/pytorch/pull/2775",
    "arch": "Siamese MLP encoder + distance module (contrastive loss)",
    "kind": ["nonfinite"],
    "layer": ["dist"],
    "step": [25, 26],
}


class Distance(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed

    def forward(self, a, b):
        if self.fixed:
            return torch.linalg.vector_norm(a - b, dim=1)
        return ((a - b) ** 2).sum(1).sqrt()


class Siamese(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 16))
        self.dist = Distance(fixed)

    def forward(self, a, b):
        return self.dist(self.encoder(a), self.encoder(b))


def contrastive(d, same, margin=2.0):
    return (same * d ** 2 + (1 - same) * torch.relu(margin - d) ** 2).mean()


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Siamese(fixed)
    proto = torch.randn(5, 12, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    if writer:
        writer.watch(model, optimizer=opt, criterion=contrastive)
    p = probe(model) if probe else None
    for step in range(120):
        ca = torch.randint(0, 5, (32,), generator=g)
        cb = torch.where(torch.rand(32, generator=g) < 0.5, ca, torch.randint(0, 5, (32,), generator=g))
        a = proto[ca] + 0.5 * torch.randn(32, 12, generator=g)
        b = proto[cb] + 0.5 * torch.randn(32, 12, generator=g)
        if step >= 25 and step % 10 == 5:
            b[0], cb[0] = a[0], ca[0]                   # a duplicated sample pairs with itself
        opt.zero_grad()
        loss = contrastive(model(a, b), (ca == cb).float())
        loss.backward()
        if p:
            p.step(loss, grad_finite=all(bool(torch.isfinite(q.grad).all()) for q in model.parameters()))
        opt.step()


def truth(bug, twin):
    first = next((i for i, r in enumerate(bug) if not r["grad_finite"]), None)
    loss_ok = bug[first]["loss"] == bug[first]["loss"] if first is not None else False
    twin_ok = all(r["grad_finite"] for r in twin)
    held = first == 25 and loss_ok and twin_ok
    return held, f"bug gradient first non-finite at step {first}, loss finite that step: {loss_ok}; twin gradients finite: {twin_ok}"


if __name__ == "__main__":
    sys.exit(main(globals()))
