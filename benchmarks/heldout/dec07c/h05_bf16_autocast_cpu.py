"""Healthy: a 1-D CNN trained under CPU autocast to bfloat16, weights kept in float32.

``torch.autocast("cpu", dtype=torch.bfloat16)`` runs the convolutions and linears in bf16 while
the parameters, their gradients and the optimizer stay float32 (the recipe that f06's bug skips):
activations are coarse (8 significant bits), the training is normal.
Source: PyTorch AMP docs (torch.autocast, CPU bfloat16); Kalamkar et al., "A Study of BFLOAT16 for
Deep Learning Training", arXiv:1905.12322, sec. 3.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {
    "healthy": True,
    "bug": "CPU autocast bfloat16 forward (activations bf16), float32 master weights",
    "source": "torch.autocast docs (CPU bfloat16); Kalamkar et al. arXiv:1905.12322",
    "arch": "1-D CNN signal classifier (Conv1d x2 + pool + linear), 3 classes",
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(1, 16, 7, padding=3)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv1d(16, 16, 7, padding=3, stride=2)
        self.act2 = nn.ReLU()
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.act2(self.conv2(self.act1(self.conv1(x)))).amax(-1))


def batch(g, n=32):
    y = torch.randint(0, 3, (n,), generator=g)
    x = 0.5 * torch.randn(n, 1, 96, generator=g)
    for i in range(n):  # class k: a pulse of width 4 + 8k at a random place
        w = 4 + 8 * int(y[i])
        s = int(torch.randint(0, 96 - w, (1,), generator=g))
        x[i, 0, s:s + w] += 1.5
    return x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x, y = batch(g)
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        loss = crit(out.float(), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.3)


if __name__ == "__main__":
    sys.exit(main(globals()))
