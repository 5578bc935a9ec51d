"""Healthy: Bayesian logistic regression sampled with stochastic gradient Langevin dynamics (SGLD).

Fools: Gaussian noise of variance 2*lr is added to every update on purpose, so the weights keep
jittering, the loss is noisy and never settles to a smooth curve, and the update/weight ratio does
not shrink as it does under SGD; the posterior samples still classify well (the loss falls).
Source of the recipe: Welling & Teh ICML 2011, "Bayesian Learning via Stochastic Gradient
Langevin Dynamics", eq. 4.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "Langevin noise (variance 2*lr) added to every update: jittering weights, noisy loss",
        "source": "Welling & Teh ICML 2011 eq. 4", "arch": "logistic regression (50 features), SGLD"}


class SGLD(torch.optim.Optimizer):
    """SGD on the posterior's negative log-density plus N(0, 2*lr) noise (Welling & Teh, eq. 4)."""

    def __init__(self, params, lr, generator):
        super().__init__(params, {"lr": lr})
        self.g = generator

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for q in group["params"]:
                if q.grad is None:
                    continue
                noise = torch.randn(q.shape, generator=self.g) * math.sqrt(2 * group["lr"])
                q.add_(-group["lr"] * q.grad + noise)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    n_data = 5000
    w_true = torch.randn(50, generator=g) * 0.5
    model = nn.Linear(50, 1)
    opt = SGLD(model.parameters(), lr=2e-5, generator=torch.Generator().manual_seed(2))
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randn(100, 50, generator=g)
        y = (torch.rand(100, generator=g) < torch.sigmoid(x @ w_true)).float()
        opt.zero_grad()
        nll = nn.functional.binary_cross_entropy_with_logits(model(x).squeeze(1), y)
        # posterior energy per datum: likelihood scaled to the data set + a N(0, 1) prior
        loss = nll + 0.5 * model.weight.pow(2).sum() / n_data
        (loss * n_data).backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.8)


if __name__ == "__main__":
    sys.exit(main(globals()))
