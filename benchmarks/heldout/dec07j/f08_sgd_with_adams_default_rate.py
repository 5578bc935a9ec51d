"""Switching the optimizer from Adam to plain SGD while keeping Adam's rate (1e-4).

Bug: ``torch.optim.SGD(model.parameters(), lr=1e-4)``: a rate chosen for Adam's normalised
update is ~1000x too small for SGD on this net (gradients ~1e-2), the relative updates are ~1e-7
and in 200 steps the loss barely moves from ln K while the twin (SGD, lr 0.1, momentum 0.9)
fits. Silent: every statistic is healthy.
Source: Humbatova et al. ICSE 2020 taxonomy, "Training > Hyperparameters > suboptimal learning
rate"; Zhang et al. ISSTA 2018 (TensorFlow bugs: "learning rate too small" symptoms, slow/no
convergence).
Fixed twin: ``SGD(lr=0.1, momentum=0.9)``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "SGD with Adam's rate 1e-4: updates ~1e-7 of the weights, the loss stays near ln K",
    "source": "Humbatova et al. ICSE 2020 (suboptimal learning rate); Zhang et al. ISSTA 2018",
    "arch": "1-D conv net on synthetic sensor windows (activity recognition)",
    "kind": ["loss_plateau", "vanishing_gradient", "frozen_weights"],
    "layer": ["<loss>", "<optimizer>"],
    "step": [0, 40],
}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    t = torch.linspace(0, 6.28, 64)
    freqs = torch.tensor([1.0, 2.0, 3.5, 5.0])
    model = nn.Sequential(nn.Conv1d(3, 16, 5, padding=2), nn.ReLU(), nn.Conv1d(16, 16, 5, padding=2), nn.ReLU(),
                          nn.AdaptiveAvgPool1d(4), nn.Flatten(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if fixed else torch.optim.SGD(model.parameters(), lr=1e-4)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        y = torch.randint(0, 4, (64,), generator=g)
        phase = torch.rand(64, 3, 1, generator=g) * 6.28
        x = torch.sin(freqs[y].view(-1, 1, 1) * t + phase) + 0.5 * torch.randn(64, 3, 64, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fb, lb = sum(r["loss"] for r in bug[:10]) / 10, sum(r["loss"] for r in bug[-20:]) / 20
    lt = sum(r["loss"] for r in twin[-20:]) / 20
    held = lb > 0.95 * fb and lb > 3 * lt
    return held, f"bug loss first 10 {fb:.3g} -> last 20 {lb:.3g}; twin last 20 {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
