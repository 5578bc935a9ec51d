"""A 12-block residual MLP whose block adds its skip connection twice: the stream doubles per block.

Bug: ``out = x + self.f(x); return out + x`` (the skip added in the block and again on return), so
each block maps x to 2x + f(x): after 12 blocks the activations are ~4096x the input and so are
the gradients of the first blocks; SGD diverges.
Source: Humbatova et al. ICSE 2020, 'Wrong network architecture / missing or redundant layer
connection' (Model / Layers); He et al. CVPR 2016 eq. 1 (y = F(x) + x, added once). No single
public report: the fault class is the taxonomy's, the code is ours.
Fixed twin: ``return x + self.f(x)``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, ratio  # noqa: E402

CASE = {
    "bug": "residual block adds its skip twice: the stream doubles per block (x4096 after 12)",
    "source": "Humbatova et al. ICSE 2020 (redundant layer connection); He et al. CVPR 2016 eq. 1",
    "arch": "deep residual MLP (12 blocks, no normalisation)",
    "kind": ["activation_explosion", "exploding_gradient", "nonfinite"],
    "layer": ["blocks.*"],
    "step": [0, 2],
}


class Block(nn.Module):
    def __init__(self, d, twice):
        super().__init__()
        self.f = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d))
        self.twice = twice

    def forward(self, x):
        out = x + self.f(x)
        return out + x if self.twice else out


class Net(nn.Module):
    def __init__(self, twice):
        super().__init__()
        self.inp = nn.Linear(10, 32)
        self.blocks = nn.Sequential(*[Block(32, twice) for _ in range(12)])
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        return self.out(self.blocks(self.inp(x)))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net(twice=not fixed)
    for blk in model.blocks:
        nn.init.normal_(blk.f[2].weight, std=0.02)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("blocks.0", "blocks.11")) if probe else None
    w = torch.randn(10, 1, generator=g)
    for _ in range(150):
        x = torch.randn(64, 10, generator=g)
        y = torch.tanh(x @ w)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    a = ratio(bug[0]["act"]["blocks.11"]["maxabs"], twin[0]["act"]["blocks.11"]["maxabs"])
    gr = ratio(bug[0]["grad"]["inp"], twin[0]["grad"]["inp"])
    lb = mean([r["loss"] for r in bug[-20:]])
    lt = mean([r["loss"] for r in twin[-20:]])
    held = a > 1000 and gr > 1000 and (lb != lb or lb > 10 * lt)
    return held, f"step 0 blocks.11 max|act| bug/twin {a:.3g}; inp grad bug/twin {gr:.3g}; last-20 loss bug {lb:.3g} twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
