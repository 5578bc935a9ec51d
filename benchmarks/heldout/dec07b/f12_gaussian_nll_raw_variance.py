"""A heteroscedastic regressor whose variance head is a plain Linear fed to a hand-written Gaussian NLL.

Bug: ``var = self.var_head(h)`` with no softplus/exp, then ``0.5 * (log(var) + (y - mu)^2 / var)``:
about half the predicted variances are negative at initialisation, ``log`` of them is NaN and the
loss is NaN from the first step.
Source: wohlert/semi-supervised-pytorch issue #16 and aicenter/GenerativeModels.jl issue #4
(variance parameterisation: "I sometimes get slightly negative values, which the log ... does not
like", https://github.com/aicenter/GenerativeModels.jl/issues/4); Nix & Weigend 1994 / Lakshminarayanan
et al. NeurIPS 2017 sec. 2.2.1 (softplus on the variance output).
Fixed twin: ``var = softplus(self.var_head(h)) + 1e-6``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "variance head without softplus: log of negative predicted variances = NaN loss at step 0",
    "source": "https://github.com/aicenter/GenerativeModels.jl/issues/4; Lakshminarayanan et al. NeurIPS 2017 sec. 2.2.1",
    "arch": "MLP trunk with mean and variance heads (heteroscedastic regression)",
    "kind": ["nonfinite"],
    "layer": ["<loss>", "var_head"],
    "step": [0, 0],
}


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.mu_head, self.var_head = nn.Linear(64, 1), nn.Linear(64, 1)
        self.fixed = fixed

    def forward(self, x):
        h = self.trunk(x)
        v = self.var_head(h)
        return self.mu_head(h), (nn.functional.softplus(v) + 1e-6 if self.fixed else v)


def gaussian_nll(out, y):
    mu, var = out
    return (0.5 * (torch.log(var) + (y - mu) ** 2 / var)).mean()


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    if writer:
        writer.watch(model, optimizer=opt)  # a function loss: recorded below
    p = probe(model, acts=("var_head",)) if probe else None
    for _ in range(150):
        x = torch.randn(64, 4, generator=g)
        y = torch.sin(x[:, :1]) + (0.1 + 0.5 * x[:, 1:2].abs()) * torch.randn(64, 1, generator=g)
        opt.zero_grad()
        loss = gaussian_nll(model(x), y)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    first = next((i for i, r in enumerate(bug) if r["loss"] != r["loss"]), None)
    head_finite = bug[0]["act"]["var_head"]["finite"] == 1.0
    twin_ok = all(r["loss"] == r["loss"] for r in twin) and twin[-1]["loss"] < twin[0]["loss"]
    held = first == 0 and head_finite and twin_ok
    return held, f"bug loss first NaN at step {first}; var_head output finite at step 0: {head_finite}; twin finite and falling: {twin_ok}"


if __name__ == "__main__":
    sys.exit(main(globals()))
