"""Healthy: a Switch-style top-1 mixture of 8 experts: on many steps some experts receive no token.

Fools: each token goes to one expert (argmax of the router); an expert that gets no token in a
batch has no gradient at all on that step (``.grad`` None after ``zero_grad(set_to_none=True)``)
and does not move; which experts idle changes from step to step.
Source of the recipe: Fedus, Zoph & Shazeer, "Switch Transformers", JMLR 2022 sec. 2.1 (top-1
routing, the gate value scales the chosen expert's output).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "top-1 routing: experts with no token in a batch have no gradient that step",
        "source": "Fedus, Zoph & Shazeer JMLR 2022 sec. 2.1 (Switch)", "arch": "top-1 mixture of 8 MLP experts + router"}


class Switch(nn.Module):
    def __init__(self, n=8):
        super().__init__()
        self.stem = nn.Linear(4, 16)
        self.router = nn.Linear(16, n)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 1)) for _ in range(n))

    def forward(self, x):
        h = torch.tanh(self.stem(x))
        prob = torch.softmax(self.router(h), -1)
        gate, idx = prob.max(-1)
        out = torch.zeros(len(x), 1)
        for k, e in enumerate(self.experts):
            sel = idx == k
            if sel.any():
                out[sel] = e(h[sel]) * gate[sel].unsqueeze(1)
        return out


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Switch()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randn(24, 4, generator=g)
        y = torch.sin(2 * x[:, :1]) * torch.sign(x[:, 1:2]) + 0.3 * x[:, 2:3]
        opt.zero_grad(set_to_none=True)
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.7)
    idle = sum(1 for r in bug for k in range(8) if r["grad"].get(f"experts.{k}.0") is None)
    return fell and idle > 0, f"{said}; (step, expert) pairs without gradient {idle} of {8 * len(bug)}"


if __name__ == "__main__":
    sys.exit(main(globals()))
