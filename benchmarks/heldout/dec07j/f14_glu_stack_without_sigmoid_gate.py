"""A stack of gated linear units written ``a * b`` instead of ``a * sigmoid(b)``: the gate is unbounded.

Bug: each block computes ``a, b = fc(x).chunk(2); x = a * b`` (the sigmoid of the GLU's gate left
out), so every block is a quadratic map of its input's scale: below 1 the scale shrinks (the
outputs start small), but once training pushes a block's scale past 1 it squares through the 6
blocks, the activations and the loss blow up (past 1e6 at about step 12, measured). Loud.
Source: Dauphin et al. ICML 2017, "Language Modeling with Gated Convolutional Networks", eq. 1
(h = (XW + b) * sigmoid(XV + c)); torch.nn.GLU docs
(https://pytorch.org/docs/stable/generated/torch.nn.GLU.html).
Fixed twin: ``x = a * torch.sigmoid(b)`` (the GLU).
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "GLU gate without its sigmoid (a * b): each of 6 blocks squares the scale, activations explode",
    "source": "Dauphin et al. ICML 2017 eq. 1; https://pytorch.org/docs/stable/generated/torch.nn.GLU.html",
    "arch": "6-block gated MLP regressor",
    "kind": ["activation_explosion", "nonfinite", "exploding_gradient", "loss_spike"],
    "layer": ["blocks.*", "<loss>"],
    "step": [0, 30],
}


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed
        self.inp = nn.Linear(12, 32)
        self.blocks = nn.ModuleList([nn.Linear(32, 64) for _ in range(6)])
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        x = self.inp(x)
        for blk in self.blocks:
            a, b = blk(x).chunk(2, dim=1)
            x = a * torch.sigmoid(b) if self.fixed else a * b
        return self.out(x).squeeze(1)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    w_true = torch.randn(12, generator=g)
    model = Net(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model, acts=tuple(f"blocks.{i}" for i in range(6))) if probe else None
    for _ in range(150):
        x = torch.randn(64, 12, generator=g) * 2
        y = torch.tanh(x @ w_true / 3) + 0.5 * torch.sin(x[:, 0])
        opt.zero_grad()
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    first = next((i for i, r in enumerate(bug) if not (math.isfinite(r["loss"]) and r["loss"] < 1e6)), None)
    mb = max(r["act"]["blocks.5"]["maxabs"] for r in bug[:5])
    mt = max(r["act"]["blocks.5"]["maxabs"] for r in twin[:5])
    twin_ok = all(math.isfinite(r["loss"]) for r in twin) and twin[-1]["loss"] < twin[0]["loss"]
    held = first is not None and first <= 30 and twin_ok
    return held, f"bug loss first >1e6 or non-finite at step {first}; last block max|x| first 5 steps bug {mb:.3g}, twin {mt:.3g}; twin ok {twin_ok}"


if __name__ == "__main__":
    sys.exit(main(globals()))
