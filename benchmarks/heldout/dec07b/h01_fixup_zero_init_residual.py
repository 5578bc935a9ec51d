"""Healthy: a 16-block residual MLP without normalisation, initialised the Fixup way (branch outputs zero).

Fools: the last Linear of every residual branch starts at exactly zero, so at step 0 the first
Linear of every branch gets an exactly-zero gradient and every branch outputs 0 (the network is
the identity plus the stem); after the first steps the branches come alive and it trains.
Source of the recipe: Zhang, Dauphin & Ma, "Fixup Initialization", ICLR 2019 sec. 3 (zero-init the
last layer of each residual branch); also ``zero_init_residual=True`` in torchvision's ResNet.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "branch output layers zero at init: zero gradients and outputs in every branch at step 0",
        "source": "Zhang, Dauphin & Ma ICLR 2019 (Fixup) sec. 3", "arch": "16-block residual MLP, no normalisation"}


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.f = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d))
        nn.init.zeros_(self.f[2].weight)
        nn.init.zeros_(self.f[2].bias)
        self.f[0].weight.data.mul_(16 ** -0.5)

    def forward(self, x):
        return x + self.f(x)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(10, 32), *[Block(32) for _ in range(16)], nn.Linear(32, 3))
    proto = torch.randn(3, 10, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        y = torch.randint(0, 3, (64,), generator=g)
        x = proto[y] + 0.8 * torch.randn(64, 10, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.3)
    g0 = bug[0]["grad"]["1.f.0"]
    g_late = bug[-1]["grad"]["1.f.0"]
    return fell and g0 == 0 and g_late > 0, f"{said}; branch 1.f.0 grad step 0 {g0:.3g}, last step {g_late:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
