"""A mixture density network whose likelihood is summed in probability space: log(0) once sigmas shrink.

Bug: the mixture NLL written as ``-log(sum_k pi_k * N(y | mu_k, sigma_k))`` with the Gaussian
densities computed by ``exp``. A sample far from every component (the sensor data has 1% glitches at +-40) gets densities that all underflow to 0 in float32: the
loss is +inf and the gradients NaN from the first batch holding a glitch.
Source: https://github.com/keras-team/keras/issues/2586 and /issues/1061 (MDN loss inf then NaN
after a few batches); https://github.com/ctallec/world-models/issues/35 (the log-sum-exp form
versus -inf without it); Bishop 1994 "Mixture density networks".
Fixed twin: the same NLL computed with ``torch.logsumexp`` over log-densities.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "MDN likelihood summed as probabilities (log of a sum of exp): every density underflows on a glitch sample, loss inf, grads NaN",
    "source": "https://github.com/keras-team/keras/issues/2586; https://github.com/ctallec/world-models/issues/35",
    "arch": "mixture density network on glitchy sensor targets (MLP trunk, pi/mu/log_sigma heads, 5 components)",
    "kind": ["nonfinite"],
    "layer": ["<loss>", "pi", "mu", "log_sigma"],
    "step": [0, 2],
}


class MDN(nn.Module):
    def __init__(self, k=5):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(1, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
        self.pi = nn.Linear(64, k)
        self.mu = nn.Linear(64, k)
        self.log_sigma = nn.Linear(64, k)

    def forward(self, x):
        h = self.trunk(x)
        return torch.log_softmax(self.pi(h), -1), self.mu(h), self.log_sigma(h)


def nll(out, y, fixed):
    log_pi, mu, log_sigma = out
    z = (y - mu) / log_sigma.exp()
    log_n = -0.5 * z * z - log_sigma - 0.5 * math.log(2 * math.pi)
    if fixed:
        return -torch.logsumexp(log_pi + log_n, -1).mean()
    return -torch.log((log_pi.exp() * log_n.exp()).sum(-1)).mean()


def data(g, n=256):
    x = torch.rand(n, 1, generator=g) * 2 - 1
    branch = (torch.rand(n, 1, generator=g) < 0.5).float() * 2 - 1
    y = branch * torch.sin(3 * x) + 0.3 * x + 0.02 * torch.randn(n, 1, generator=g)
    glitch = torch.rand(n, 1, generator=g) < 0.01
    y = torch.where(glitch, 40 * torch.sign(torch.randn(n, 1, generator=g)), y)
    return x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = MDN()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        x, y = data(g)
        opt.zero_grad()
        loss = nll(model(x), y, fixed)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def _first_bad(rows):
    for i, r in enumerate(rows):
        if not math.isfinite(r["loss"]):
            return i
    return None


def truth(bug, twin):
    fb, ft = _first_bad(bug), _first_bad(twin)
    l0, lt = mean([r["loss"] for r in twin[:10]]), mean([r["loss"] for r in twin[-20:]])
    held = fb is not None and fb <= 2 and ft is None and lt < l0 - 0.3
    return held, f"bug loss first non-finite at step {fb}; twin finite throughout: {ft is None}, NLL first-10 {l0:.3g} -> last-20 {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
