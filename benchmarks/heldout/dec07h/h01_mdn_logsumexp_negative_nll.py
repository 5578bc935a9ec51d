"""A mixture density network on a sharp two-branch target: its NLL goes far below zero, correctly.

Healthy, built to fool: a continuous density's negative log-likelihood is negative once the
components are sharper than 1/sqrt(2 pi e) (here noise 0.01: the floor is about -2.2), and keeps
falling while the sigmas shrink; the log-sum-exp is the stable form.
Source: Bishop 1994 "Mixture density networks"; https://github.com/ctallec/world-models/issues/35
(log-sum-exp form of the GMM loss).
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {"healthy": True, "what": "mixture density network whose NLL falls to about -2 (a density, not a probability)",
        "source": "Bishop 1994 'Mixture density networks'; https://github.com/ctallec/world-models/issues/35",
        "arch": "MDN (tanh MLP trunk, 3 heads, 4 components)"}


class MDN(nn.Module):
    def __init__(self, k=4):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(1, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
        self.pi = nn.Linear(64, k)
        self.mu = nn.Linear(64, k)
        self.log_sigma = nn.Linear(64, k)

    def forward(self, x):
        h = self.trunk(x)
        return torch.log_softmax(self.pi(h), -1), self.mu(h), self.log_sigma(h)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = MDN()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(300):
        x = torch.rand(256, 1, generator=g) * 2 - 1
        branch = (torch.rand(256, 1, generator=g) < 0.5).float() * 2 - 1
        y = branch * (0.5 + 0.4 * x) + 0.01 * torch.randn(256, 1, generator=g)
        log_pi, mu, log_sigma = model(x)
        z = (y - mu) / log_sigma.exp()
        log_n = -0.5 * z * z - log_sigma - 0.5 * math.log(2 * math.pi)
        loss = -torch.logsumexp(log_pi + log_n, -1).mean()
        opt.zero_grad()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    a, b = mean([r["loss"] for r in bug[:10]]), mean([r["loss"] for r in bug[-20:]])
    finite = all(math.isfinite(r["loss"]) for r in bug)
    return finite and b < 0 and b < a - 1.0, f"NLL first-10 {a:.3g} -> last-20 {b:.3g}; finite throughout {finite}"


if __name__ == "__main__":
    sys.exit(main(globals()))
