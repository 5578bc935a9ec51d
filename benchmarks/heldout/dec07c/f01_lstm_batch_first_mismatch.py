"""An LSTM classifier fed (batch, time, feature) batches while built with batch_first=False.

Bug: the loader yields ``(B, T, F)`` but ``nn.LSTM`` keeps its default ``batch_first=False`` and
reads it as ``(T, B, F)``: the recurrence runs across the samples of the batch, and
``out[:, -1]`` picks, for sample i, the state after samples 0..i at time step T-1. The label
(which of three features has the largest sum over time) is barely visible there: the loss stays
far above the twin's. No error is raised because the shapes still fit.
Source: https://discuss.pytorch.org/t/lstm-change-batch-first-true-loss-does-not-decrease/62364;
https://theneuralbase.com/pytorch/learn/intermediate/input-shape-for-rnns-seq-batch-features/
("get the order wrong and PyTorch will fail silently").
Fixed twin: ``nn.LSTM(..., batch_first=True)``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "nn.LSTM left at batch_first=False while fed (batch, time, feature): recurrence across samples",
    "source": "https://discuss.pytorch.org/t/lstm-change-batch-first-true-loss-does-not-decrease/62364",
    "arch": "LSTM sequence classifier (3 classes) + linear head",
    "kind": ["loss_plateau"],
    "layer": ["<loss>", "lstm", "<input>"],
    "step": [0, 150],
}


class Net(nn.Module):
    def __init__(self, batch_first):
        super().__init__()
        self.lstm = nn.LSTM(4, 32, batch_first=batch_first)
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1, :])


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net(batch_first=fixed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randn(32, 16, 4, generator=g)
        y = x[:, :, :3].sum(1).argmax(1)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = lb > 0.8 and lb > 3 * lt
    return held, f"last-30 loss bug {lb:.3g} twin {lt:.3g} (ln 3 = 1.10)"


if __name__ == "__main__":
    sys.exit(main(globals()))
