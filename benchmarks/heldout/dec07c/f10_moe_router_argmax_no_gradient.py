"""A top-1 mixture of experts whose output is not scaled by the router probability: the router never learns.

Bug: the layer routes each token with ``router(x).argmax(-1)`` and returns the chosen expert's
output as is. argmax has no gradient, and since the router's probability never multiplies the
output (as in Switch Transformer's ``p_i(x) * E_i(x)``), no gradient ever reaches the router: its
weights stay at their random init.
Source: Fedus, Zoph & Shazeer JMLR 2022 (Switch Transformer) sec. 2.1 (the gate value multiplies
the expert output so the router is differentiable);
https://github.com/lucidrains/mixture-of-experts (gates multiply expert outputs); Humbatova et
al. ICSE 2020, 'Wrong network architecture' (missing connection).
Fixed twin: the expert's output times the router's softmax probability of that expert.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "top-1 MoE returns the argmax expert's output without the router probability: router gets no gradient",
    "source": "Fedus, Zoph & Shazeer JMLR 2022 sec. 2.1; https://github.com/lucidrains/mixture-of-experts",
    "arch": "top-1 mixture of 4 MLP experts + linear router, regression",
    "kind": ["no_gradient", "frozen_weights"],
    "layer": ["moe.router"],
    "step": [0, 2],
}


class MoE(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed
        self.router = nn.Linear(8, 4)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8)) for _ in range(4))

    def forward(self, x):
        probs = self.router(x).softmax(-1)
        idx = probs.argmax(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            sel = idx == e
            if sel.any():
                y = expert(x[sel])
                if self.fixed:
                    y = y * probs[sel, e:e + 1]
                out[sel] = y
        return out


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.moe = MoE(fixed)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.moe(self.inp(x)))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randn(64, 4, generator=g)
        y = torch.where(x[:, :1] > 0, x[:, 1:2] ** 2, -x[:, 2:3])
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    gb = [r["grad"]["moe.router"] for r in bug]
    gt = mean([r["grad"]["moe.router"] for r in twin])
    never = all(v is None or v == 0.0 for v in gb)
    held = never and gt > 1e-4
    return held, f"router grad bug: None/0 at every step = {never}; twin mean router grad norm {gt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
