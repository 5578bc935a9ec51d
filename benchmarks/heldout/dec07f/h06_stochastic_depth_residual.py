"""Healthy: a residual MLP with stochastic depth: each block is skipped on about half the steps.

Fools: on a step where a block is dropped its output is not used, so it gets no gradient
(``p.grad`` None, after zero_grad(set_to_none=True)) and no update; which blocks are silent changes
from step to step; the loss is noisier than usual.
Source of the recipe: Huang et al. ECCV 2016 ("Deep networks with stochastic depth"), sec. 3
(batch-level block dropping, survival probability 0.5).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "blocks dropped at random per step: no gradient on ~half the steps for each block",
        "source": "Huang et al. ECCV 2016 sec. 3", "arch": "residual MLP regressor with stochastic depth"}


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc = nn.Linear(d, d)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.fc(self.norm(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(10, 64)
        self.blocks = nn.ModuleList(Block(64) for _ in range(6))
        self.out = nn.Linear(64, 1)

    def forward(self, x, keep):
        h = self.inp(x)
        for k, blk in zip(keep, self.blocks):
            if k:
                h = h + 2.0 * blk(h)  # survival 0.5: scaled by 1/0.5 when kept
        return self.out(h)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    w = torch.randn(10, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randn(64, 10, generator=g)
        y = torch.tanh(x @ w / 3).unsqueeze(1)
        keep = (torch.rand(6, generator=g) < 0.5).tolist()
        opt.zero_grad(set_to_none=True)
        loss = crit(model(x, keep), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.5, first=10, last=30)
    none = sum(1 for r in bug if r["grad"]["blocks.0.fc"] is None)
    return fell and 0.3 * len(bug) < none < 0.7 * len(bug), f"{said}; blocks.0.fc without gradient on {none}/{len(bug)} steps"


if __name__ == "__main__":
    sys.exit(main(globals()))
