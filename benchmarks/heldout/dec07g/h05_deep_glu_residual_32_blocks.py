"""A 32-block pre-norm residual MLP whose feed-forwards are GLUs (sigmoid gates).

Healthy, built to fool: very deep (98 Linear layers), the branch outputs are small against the
residual stream (each block's output projection is zero-initialised, so every branch starts
silent and its value/gate weights get no gradient at step 0), and the sigmoid gates are near 0.5
or saturated. The regression loss falls.
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "arch": "32 pre-LN residual GLU blocks, width 32, regression",
        "fools": "very deep, zero-init branch outputs (silent branches, zero grads at step 0), sigmoid gates"}


class GLUBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.value = nn.Linear(d, 2 * d)
        self.gate = nn.Linear(d, 2 * d)
        self.proj = nn.Linear(2 * d, d)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, x):
        h = self.norm(x)
        return x + self.proj(self.value(h) * torch.sigmoid(self.gate(h)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16, 32)
        self.blocks = nn.Sequential(*[GLUBlock(32) for _ in range(32)])
        self.norm = nn.LayerNorm(32)
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        return self.out(self.norm(self.blocks(self.inp(x))))


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(16, generator=torch.Generator().manual_seed(9))
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    crit = nn.MSELoss()
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        x = torch.randn(64, 16, generator=g)
        y = (torch.tanh(x @ w / 3) * 2 + 0.5 * x[:, 0] * x[:, 2])[:, None]
        loss = crit(model(x), y)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.3)


if __name__ == "__main__":
    sys.exit(main(globals()))
