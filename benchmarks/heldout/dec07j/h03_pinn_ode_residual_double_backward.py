"""Healthy: a physics-informed network (PINN) solving u'' = -4u, u(0)=0, u'(0)=2 by its residual.

Fools: the loss is built from derivatives of the output w.r.t. the input (autograd with
create_graph, double backward), it starts at ~3 and falls by orders of magnitude to ~2e-3;
tanh units, full-batch collocation points, a loss with two terms of very different sizes.
Source of the recipe: Raissi, Perdikaris & Karniadakis, J. Comput. Phys. 2019, "Physics-informed
neural networks" sec. 2-3.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "loss from second derivatives (double backward), tiny and falling by orders of magnitude",
        "source": "Raissi et al. J. Comput. Phys. 2019 sec. 2-3", "arch": "tanh MLP PINN (1 -> 32 -> 32 -> 1)"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    x = torch.linspace(0, 2, 64).unsqueeze(1)
    x0 = torch.zeros(1, 1, requires_grad=True)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(250):
        xc = x.clone().requires_grad_(True)
        u = model(xc)
        du = torch.autograd.grad(u.sum(), xc, create_graph=True)[0]
        d2u = torch.autograd.grad(du.sum(), xc, create_graph=True)[0]
        u0 = model(x0)
        du0 = torch.autograd.grad(u0.sum(), x0, create_graph=True)[0]
        opt.zero_grad()
        loss = (d2u + 4 * u).pow(2).mean() + u0.pow(2).mean() + (du0 - 2).pow(2).mean()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            err = float((model(x).detach() - torch.sin(2 * x)).abs().max())
            p.step(loss, err=err)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.05)
    return fell, f"{said}; max |u - sin 2x| at the end {bug[-1]['err']:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
