"""A classifier trained with an input-gradient penalty (double backward, create_graph=True).

Healthy, built to fool: the loss adds lambda * ||d CE / d x||^2 (Drucker & LeCun's double
backpropagation), so backward runs through a graph that itself contains a backward: the hooks see
a second pass and the gradients mix first and second derivatives. It trains.
Source: Drucker & LeCun 1992 "Improving generalization performance using double
backpropagation"; Ross & Doshi-Velez AAAI 2018 (input gradient regularisation).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "what": "input-gradient penalty: a double backward (create_graph=True) every step",
        "source": "Drucker & LeCun 1992 (double backpropagation); Ross & Doshi-Velez AAAI 2018",
        "arch": "MLP classifier (Softplus, smooth for second derivatives)"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(10, 64), nn.Softplus(), nn.Linear(64, 64), nn.Softplus(), nn.Linear(64, 3))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    centers = 2 * torch.randn(3, 10, generator=g)
    for _ in range(200):
        y = torch.randint(0, 3, (128,), generator=g)
        x = (centers[y] + torch.randn(128, 10, generator=g)).requires_grad_(True)
        opt.zero_grad()
        ce = crit(model(x), y)
        (gx,) = torch.autograd.grad(ce, x, create_graph=True)
        loss = ce + 10.0 * gx.pow(2).sum(1).mean()
        loss.backward()
        if p:
            p.step(loss, ce=float(ce.detach()))
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.3)


if __name__ == "__main__":
    sys.exit(main(globals()))
