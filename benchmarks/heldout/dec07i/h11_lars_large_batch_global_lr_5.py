"""Healthy: large-batch training (batch 1024) with LARS, global learning rate 5.0 and a
layer-wise trust ratio of 0.001 (You et al.).

What looks wrong: the optimizer's learning rate reads 5.0, far above any usual value, and the
raw gradient norms differ by orders of magnitude between layers; the trust ratio rescales each
layer's step to ~0.005 x its weight norm, so the updates are ordinary and the model trains.
Source: You, Gitman & Ginsburg 2017 "Large Batch Training of Convolutional Networks" (LARS),
Algorithm 1; https://github.com/NVIDIA/apex/blob/master/apex/parallel/LARC.py.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {"healthy": True, "what": "LARS with lr 5.0: huge nominal rate, trust ratio keeps updates small",
        "source": "You et al. 2017 (LARS) Algorithm 1; https://github.com/NVIDIA/apex/blob/master/apex/parallel/LARC.py",
        "arch": "MLP classifier (32 -> 256 -> 256 -> 8), batch 1024"}


class LARS(torch.optim.Optimizer):
    """SGD with momentum whose per-tensor step is scaled by eta * ||w|| / ||g|| (LARC-style)."""

    def __init__(self, params, lr, momentum=0.9, eta=0.001):
        super().__init__(params, dict(lr=lr, momentum=momentum, eta=eta))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                w, g = p.norm(), p.grad.norm()
                trust = group["eta"] * w / g if w > 0 and g > 0 else torch.tensor(1.0)
                d = p.grad * trust
                buf = self.state[p].setdefault("buf", torch.zeros_like(p))
                buf.mul_(group["momentum"]).add_(d)
                p.add_(buf, alpha=-group["lr"])


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    w_true = torch.randn(32, 8, generator=g)
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 8))
    opt = LARS(model.parameters(), lr=5.0)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("1", "3")) if probe else None
    for _ in range(150):
        x = torch.randn(1024, 32, generator=g)
        y = (x @ w_true).argmax(1)
        opt.zero_grad()
        out = model(x)
        loss = crit(out, y)
        loss.backward()
        if p:
            p.step(loss, acc=float((out.argmax(1) == y).float().mean()))
        opt.step()


def truth(bug, twin):
    ok, msg = loss_fell(bug, 0.3)
    acc = mean([r["acc"] for r in bug[-20:]])
    dead = max(bug[-1]["act"][k]["zero"] for k in ("1", "3"))
    return ok and acc > 0.85 and dead < 0.9, f"{msg}; last-20 accuracy {acc:.3f}; ReLU zero fraction at the end (max of 2) {dead:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
