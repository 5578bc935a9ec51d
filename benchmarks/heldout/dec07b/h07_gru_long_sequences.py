"""Healthy: a GRU classifier on 160-step sequences whose label depends on the whole sequence.

Fools: backpropagation through 160 time steps; the recurrent weights' gradients are small next to
the head's, and the hidden state is close to saturation on part of the units.
Source of the recipe: Cho et al. EMNLP 2014 (GRU); the adding/"sum sign" long-sequence tasks of
Hochreiter & Schmidhuber 1997 sec. 5 in a gentler form.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "BPTT through 160 steps: small recurrent gradients next to the head's",
        "source": "Cho et al. EMNLP 2014; Hochreiter & Schmidhuber 1997 sec. 5", "arch": "GRU (hidden 32) + linear, 160-step sequences"}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(2, 32, batch_first=True)
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        return self.head(self.gru(x)[1][-1])


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        bias = torch.randn(32, 1, generator=g) * 0.15
        v = bias + torch.randn(32, 160, generator=g)
        y = (v.mean(1) > 0).long()
        x = torch.stack([v, torch.ones_like(v)], -1)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.6)
    return fell, said


if __name__ == "__main__":
    sys.exit(main(globals()))
