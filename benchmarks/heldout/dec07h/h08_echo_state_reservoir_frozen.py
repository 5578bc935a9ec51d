"""An echo state network: a frozen random recurrent reservoir, only the linear readout trains.

Healthy, built to fool: the nn.RNN reservoir (spectral radius 0.9) is frozen by design (reservoir
computing): no gradient, no update for the whole run, while the readout learns to predict a
delayed (and a nonlinear) function of the input.
Source: Jaeger 2001 "The echo state approach" (GMD report 148); Lukosevicius 2012 "A practical
guide to applying echo state networks".
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "what": "frozen random recurrent reservoir (no gradient ever) with a trained linear readout",
        "source": "Jaeger 2001 GMD report 148; Lukosevicius 2012 (practical guide to ESNs)",
        "arch": "nn.RNN reservoir (tanh, 200 units, frozen) + linear readout"}


class ESN(nn.Module):
    def __init__(self, g):
        super().__init__()
        self.reservoir = nn.RNN(1, 200, batch_first=True)
        with torch.no_grad():
            w = torch.randn(200, 200, generator=g) * (torch.rand(200, 200, generator=g) < 0.1)
            w *= 0.9 / torch.linalg.eigvals(w).abs().max()
            self.reservoir.weight_hh_l0.copy_(w)
            self.reservoir.weight_ih_l0.uniform_(-0.5, 0.5, generator=g)
            self.reservoir.bias_hh_l0.zero_()
            self.reservoir.bias_ih_l0.zero_()
        self.reservoir.requires_grad_(False)
        self.readout = nn.Linear(200, 1)

    def forward(self, u):
        return self.readout(self.reservoir(u)[0])


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = ESN(g)
    opt = torch.optim.Adam(model.readout.parameters(), lr=1e-2)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        u = torch.rand(32, 80, 1, generator=g) - 0.5
        y = torch.zeros_like(u)
        y[:, 5:] = 2 * u[:, 2:-3] + torch.sin(3 * u[:, 4:-1])  # a delayed input and a nonlinear one
        opt.zero_grad()
        loss = crit(model(u)[:, 10:], y[:, 10:])
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    ok, detail = loss_fell(bug, 0.5)
    none = all(r["grad"]["reservoir"] is None for r in bug)
    return ok and none, f"{detail}; reservoir without gradient at every step: {none}"


if __name__ == "__main__":
    sys.exit(main(globals()))
