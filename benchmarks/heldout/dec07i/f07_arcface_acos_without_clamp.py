"""A face-embedding style ArcFace head whose ``acos`` gets cosines that round to 1.

Bug: ``theta = torch.acos(cos)`` with no clamp. With ArcFace's defaults (s=64, m=0.5) the margin
keeps pulling each embedding onto its class centre; at step 10 one sample's float32 cosine with its
centre rounds to exactly 1.0 (measured), where acos' derivative -1/sqrt(1 - cos^2) is infinite: the
gradient is NaN at that step (the loss still finite) and every weight is NaN from the next step on.
Source: https://github.com/ronghuaiyang/arcface-pytorch/issues/68 ("when cosine(theta) == 1 the
loss would become NaN" -> clamp(-1+eps, 1-eps)), https://github.com/ronghuaiyang/arcface-pytorch/issues/32,
https://github.com/MccreeZhao/FR-Loss-on-Mnist/issues/2 (input and weight "almost exactly the same direction").
Fixed twin: ``cos.clamp(-1 + 1e-7, 1 - 1e-7)`` before acos.
"""

import math
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402


class ArcFace(nn.Module):
    def __init__(self, dim, classes, clamp, s=64.0, m=0.5):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(classes, dim) * 0.1)
        self.clamp, self.s, self.m = clamp, s, m

    def forward(self, emb, y):
        cos = F.normalize(emb, dim=1) @ F.normalize(self.weight, dim=1).T
        if self.clamp:
            cos = cos.clamp(-1 + 1e-7, 1 - 1e-7)
        theta = torch.acos(cos)
        target = F.one_hot(y, cos.size(1)).bool()
        return self.s * torch.where(target, torch.cos(theta + self.m), cos)


class Net(nn.Module):
    def __init__(self, clamp):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
        self.arc = ArcFace(2, 4, clamp)

    def forward(self, x, y):
        return self.arc(self.body(x), y)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    centres = torch.randn(4, 20, generator=g) * 2
    model = Net(clamp=fixed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(STEPS):
        y = torch.randint(0, 4, (64,), generator=g)
        x = centres[y] + 0.3 * torch.randn(64, 20, generator=g)
        opt.zero_grad()
        loss = crit(model(x, y), y)
        loss.backward()
        if p:
            grads = [q.grad for q in model.parameters() if q.grad is not None]
            p.step(loss, gfinite=all(bool(torch.isfinite(t).all()) for t in grads))
        opt.step()


STEPS = 200
NAN_STEP = 10  # first step whose gradient is non-finite (measured by the probe, --truth)

CASE = {
    "bug": "ArcFace acos(cos) without clamp: a cosine rounding to 1 gives an infinite/NaN gradient",
    "source": "https://github.com/ronghuaiyang/arcface-pytorch/issues/68; https://github.com/ronghuaiyang/arcface-pytorch/issues/32",
    "arch": "MLP embedding (2-D) + ArcFace margin head (s=64, m=0.5), 4 classes",
    "kind": ["nonfinite"],
    "layer": ["arc", "<loss>"],
    "step": [NAN_STEP, NAN_STEP + 1],
}


def truth(bug, twin):
    first_g = next((i for i, r in enumerate(bug) if not r["gfinite"]), None)
    first_l = next((i for i, r in enumerate(bug) if not math.isfinite(r["loss"])), None)
    twin_ok = all(r["gfinite"] and math.isfinite(r["loss"]) for r in twin)
    lt = mean([r["loss"] for r in twin[-20:]])
    held = first_g == NAN_STEP and (first_l is None or first_l > first_g) and twin_ok and lt < 0.5 * twin[0]["loss"]
    return held, f"bug gradient first non-finite at step {first_g}, loss first non-finite at step {first_l}; twin finite throughout {twin_ok}, twin loss {twin[0]['loss']:.3g} -> {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
