"""Behaviour cloning of a bang-bang controller with a tanh action head: the head saturates on purpose.

Healthy, built to fool: the expert's actions are +-0.995 (full throttle either way), so the tanh
output sits at |a| > 0.99 for most samples once learnt, and its local derivative is ~0.01. The loss
still falls by orders of magnitude.
Source: Pomerleau 1989 / behaviour cloning with tanh-squashed continuous actions (e.g.
https://spinningup.openai.com/en/latest/algorithms/sac.html "the action is squashed by tanh").
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "what": "tanh action head saturated at +-0.995 targets (bang-bang expert) while MSE falls",
        "source": "https://spinningup.openai.com/en/latest/algorithms/sac.html (tanh-squashed actions)",
        "arch": "policy MLP (ReLU trunk, Tanh head, 2 actions)"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential()
    model.add_module("fc1", nn.Linear(6, 64))
    model.add_module("act1", nn.ReLU())
    model.add_module("fc2", nn.Linear(64, 2))
    model.add_module("squash", nn.Tanh())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("squash",)) if probe else None
    w = torch.randn(6, 2, generator=g)
    for _ in range(250):
        s = torch.randn(128, 6, generator=g)
        a = 0.995 * torch.sign(s @ w)
        opt.zero_grad()
        loss = crit(model(s), a)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    ok, detail = loss_fell(bug, 0.1)
    sat = bug[-1]["act"]["squash"]["sat99"]
    return ok and sat > 0.5, f"{detail}; final fraction of |tanh| >= 0.99: {sat:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
