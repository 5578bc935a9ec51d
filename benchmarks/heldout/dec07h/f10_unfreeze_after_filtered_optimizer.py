"""Staged fine-tuning: the backbone is unfrozen at step 30, but the optimizer was built on the trainable filter.

Bug: ``optim.Adam(filter(lambda p: p.requires_grad, model.parameters()))`` while the backbone was
frozen, then ``requires_grad_(True)`` on the backbone at step 30 without adding its parameters to
the optimizer. From step 30 the backbone gets gradients every step but never moves.
Source: https://theneuralbase.com/pytorch/learn/intermediate/freezing-base-model-weights/ ("BAD:
unfreezing then calling optimizer.step() uses stale param_groups"); https://discuss.pytorch.org/t/best-practice-for-freezing-layers/58156
(parameters not passed to the optimizer get gradients but are never updated).
Fixed twin: ``opt.add_param_group({"params": backbone.parameters()})`` at the unfreeze.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "backbone unfrozen at step 30 but the optimizer holds only the parameters trainable when it was built: grads, no updates",
    "source": "https://theneuralbase.com/pytorch/learn/intermediate/freezing-base-model-weights/; https://discuss.pytorch.org/t/best-practice-for-freezing-layers/58156",
    "arch": "CNN backbone (Conv2d x2) + linear head, staged fine-tuning",
    "kind": ["frozen_weights"],
    "layer": ["backbone", "backbone.*"],
    "step": [30, 45],
}

UNFREEZE = 30


def batch(g, n=64):
    y = torch.randint(0, 4, (n,), generator=g)
    x = 0.5 * torch.randn(n, 1, 12, 12, generator=g)
    for i in range(n):  # a diagonal stroke whose direction / side is the class
        q = int(y[i])
        for k in range(8):
            r = 2 + k
            c = 2 + k if q % 2 == 0 else 9 - k
            x[i, 0, r, c + (q // 2)] += 1.5
    return x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential()
    model.add_module("backbone", nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(),
                                               nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                                               nn.AdaptiveAvgPool2d(2), nn.Flatten()))
    model.add_module("head", nn.Linear(32, 4))
    model.backbone.requires_grad_(False)
    opt = torch.optim.Adam(filter(lambda q: q.requires_grad, model.parameters()), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for step in range(220):
        if step == UNFREEZE:
            model.backbone.requires_grad_(True)
            if fixed:
                opt.add_param_group({"params": model.backbone.parameters()})
        x, y = batch(g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    name = "backbone.0"
    gb = mean([r["grad"][name] for r in bug[UNFREEZE:UNFREEZE + 20]])
    wb = [r["weight"][name] for r in bug]
    wt = [r["weight"][name] for r in twin]
    moved_b = abs(wb[-1] - wb[UNFREEZE]) / wb[UNFREEZE]
    moved_t = abs(wt[-1] - wt[UNFREEZE]) / wt[UNFREEZE]
    lb, lt = mean([r["loss"] for r in bug[-20:]]), mean([r["loss"] for r in twin[-20:]])
    held = gb > 0 and moved_b == 0 and moved_t > 0.05 and lb > 2 * lt
    return held, (f"bug backbone.0 grad after unfreeze {gb:.2g}, weight change {moved_b:.2g}; twin weight change {moved_t:.2g}; "
                  f"last-20 loss bug {lb:.3g} twin {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
