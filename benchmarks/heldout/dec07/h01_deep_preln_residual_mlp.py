"""Healthy: a 24-block pre-LayerNorm residual MLP trained with AdamW and a short warmup.

Fools: depth. Early blocks see gradients summed over 24 residual paths (large), the last blocks'
branch outputs are small at init, and per-layer gradient norms span orders of magnitude; nothing
is wrong and the loss falls steadily.
Source of the recipe: pre-LN residual blocks (Xiong et al., "On Layer Normalization in the
Transformer Architecture", ICML 2020).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "24 residual blocks: per-layer gradient norms span orders of magnitude",
        "source": "Xiong et al. ICML 2020 (pre-LN)", "arch": "deep pre-LN residual MLP"}


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class Net(nn.Module):
    def __init__(self, d=32, depth=24):
        super().__init__()
        self.inp = nn.Linear(10, d)
        self.blocks = nn.Sequential(*[Block(d) for _ in range(depth)])
        self.norm = nn.LayerNorm(d)
        self.out = nn.Linear(d, 1)

    def forward(self, x):
        return self.out(self.norm(self.blocks(self.inp(x))))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    w = torch.randn(10, generator=g)
    for _ in range(200):
        x = torch.randn(64, 10, generator=g)
        y = (torch.sin(x @ w) + 0.5 * x[:, 0] * x[:, 1]).unsqueeze(1)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()
        sched.step()


def truth(bug, twin):
    return loss_fell(bug, 0.5, first=20)


if __name__ == "__main__":
    sys.exit(main(globals()))
