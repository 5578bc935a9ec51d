"""Healthy: gradient accumulation over 4 micro-batches per optimizer step (loss divided by 4).

Fools: ``.grad`` grows within each group of four backward passes and ``zero_grad`` runs only
every fourth micro-batch: gradients "accumulate", on purpose; the optimizer steps once per four
forwards.
Source of the recipe: huggingface/transformers issue #1563 and the Trainer's
``gradient_accumulation_steps``; Lightning ``accumulate_grad_batches``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "gradients accumulated over 4 backward passes between zero_grad calls",
        "source": "https://github.com/huggingface/transformers/issues/1563; Lightning accumulate_grad_batches",
        "arch": "1-D CNN classifier"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Conv1d(2, 16, 5, padding=2), nn.ReLU(), nn.Conv1d(16, 16, 5, padding=2), nn.ReLU(),
                          nn.AdaptiveMaxPool1d(1), nn.Flatten(), nn.Linear(16, 3))
    proto = torch.randn(3, 2, 32, generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        opt.zero_grad()
        total = 0.0
        for _micro in range(4):
            y = torch.randint(0, 3, (16,), generator=g)
            x = proto[y] + 1.0 * torch.randn(16, 2, 32, generator=g)
            loss = crit(model(x), y) / 4
            loss.backward()
            total = total + loss.detach()
        if writer:
            writer.record(loss=total)
        if p:
            p.step(total)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.3)


if __name__ == "__main__":
    sys.exit(main(globals()))
