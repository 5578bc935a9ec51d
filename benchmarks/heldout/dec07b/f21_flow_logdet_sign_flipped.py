"""A RealNVP-style 2-D normalising flow whose loss adds the log-determinant instead of subtracting it.

Bug: NLL written as ``0.5 * z^2 - ... + sum(s)`` (the log |det J| of x -> z added with the wrong
sign): the loss rewards contracting every coupling (s -> -inf), the scale nets' outputs grow
without bound and the "NLL" falls without limit (to about -75 within 200 steps here, no NaN;
the twin's settles near 1.6).
Source: VincentStimper/normalizing-flows PR #28 "Fixed sign of log det of forward_and_log_det"
(https://github.com/VincentStimper/normalizing-flows/pull/28); ikostrikov/pytorch-flows issue #16
("Need minus sign in reverse log density computation",
https://github.com/ikostrikov/pytorch-flows/issues/16); Dinh et al. ICLR 2017 eq. 3.
Fixed twin: ``- sum(s)``.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, series  # noqa: E402

CASE = {
    "bug": "flow NLL adds log|det J| instead of subtracting it: scales driven to -inf, loss unbounded below",
    "source": "https://github.com/VincentStimper/normalizing-flows/pull/28; https://github.com/ikostrikov/pytorch-flows/issues/16",
    "arch": "RealNVP-style affine coupling flow (4 couplings, 2-D data)",
    "kind": ["activation_explosion", "exploding_gradient", "nonfinite", "loss_spike", "activation_collapse"],
    "layer": ["couplings.*", "<loss>"],
    "step": [0, 100],
}


class Coupling(nn.Module):
    def __init__(self, flip):
        super().__init__()
        self.flip = flip
        self.s = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))
        self.t = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))

    def forward(self, x):
        a, b = (x[:, 1:], x[:, :1]) if self.flip else (x[:, :1], x[:, 1:])
        s = self.s(a)
        b = b * torch.exp(s) + self.t(a)
        out = torch.cat([b, a], 1) if self.flip else torch.cat([a, b], 1)
        return out, s.squeeze(1)


class Flow(nn.Module):
    def __init__(self):
        super().__init__()
        self.couplings = nn.ModuleList(Coupling(i % 2 == 1) for i in range(4))

    def forward(self, x):
        logdet = torch.zeros(len(x))
        for c in self.couplings:
            x, s = c(x)
            logdet = logdet + s
        return x, logdet


def moons(g, n):
    t = torch.rand(n, generator=g) * math.pi
    upper = torch.rand(n, generator=g) < 0.5
    x = torch.where(upper, torch.cos(t), 1 - torch.cos(t))
    y = torch.where(upper, torch.sin(t), 0.5 - torch.sin(t))
    return torch.stack([x, y], 1) + 0.05 * torch.randn(n, 2, generator=g)


def make_nll(fixed):
    def nll(out, _target=None):
        z, logdet = out
        return (0.5 * z.pow(2).sum(1) + math.log(2 * math.pi) - (logdet if fixed else -logdet)).mean()
    return nll


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Flow()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    nll = make_nll(fixed)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model, acts=("couplings.0.s",)) if probe else None
    for _ in range(200):
        x = moons(g, 128)
        opt.zero_grad()
        loss = nll(model(x))
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    sb = [v for v in series(bug, "act", "couplings.0.s", "maxabs") if v is not None]
    st = [v for v in series(twin, "act", "couplings.0.s", "maxabs") if v is not None]
    grow = max(sb) / max(st)
    lb = [r["loss"] for r in bug]
    low = min((v for v in lb if v == v), default=float("nan"))
    lt = mean([r["loss"] for r in twin[-20:]])
    held = grow > 10 and (low < lt - 50 or any(v != v for v in lb))
    return held, f"max|s| of coupling 0 bug/twin {grow:.3g}; bug min loss {low:.3g} (NaN seen: {any(v != v for v in lb)}); twin last-20 loss {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
