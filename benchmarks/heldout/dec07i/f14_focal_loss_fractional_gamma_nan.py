"""A dense objectness head (detection-style, per-pixel) trained with a hand-written focal loss at
gamma = 0.5.

Bug: ``(1 - pt) ** gamma * ce`` with ``pt = exp(-ce)`` and gamma < 1. Once an easy background
logit is confident enough that ``ce`` rounds ``pt`` to exactly 1.0 in float32, ``(1 - pt) ** 0.5``
has an infinite derivative at 0: the forward value is still finite (0 * 0), the gradient is
0 * inf = NaN (first at step 19, measured), and every weight is NaN from the next step.
Source: https://github.com/kornia/kornia/issues/918 ("NaN gradients on backward pass with focal
loss ... when 0 < gamma < 1"), https://github.com/fizyr/keras-retinanet/issues/706 (gamma=0.5 NaN),
https://github.com/liuyuisanai/Focal-Loss/issues/11 ("When gamma set below 1, loss will go to nan").
Fixed twin: ``(1 - pt).clamp(min=1e-6) ** gamma`` (kornia's fix: an epsilon inside the power).
"""

import math
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402


class FocalLoss(nn.Module):
    def __init__(self, gamma, safe):
        super().__init__()
        self.gamma, self.safe = gamma, safe

    def forward(self, logits, target):
        ce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
        pt = torch.exp(-ce)
        mod = (1 - pt).clamp(min=1e-6) if self.safe else (1 - pt)
        return (mod ** self.gamma * ce).mean()


class Dense(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.cls = nn.Conv2d(16, 1, 1)

    def forward(self, x):
        return self.cls(self.backbone(x))


def batch(g, n=16):
    x = 0.2 * torch.randn(n, 1, 16, 16, generator=g)
    t = torch.zeros(n, 1, 16, 16)
    for i in range(n):
        r, c = torch.randint(0, 12, (2,), generator=g).tolist()
        x[i, 0, r:r + 4, c:c + 4] += 1.0
        t[i, 0, r:r + 4, c:c + 4] = 1.0
    return x, t


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Dense()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    crit = FocalLoss(0.5, safe=fixed)
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x, t = batch(g)
        opt.zero_grad()
        out = model(x)
        loss = crit(out, t)
        loss.backward()
        if p:
            grads = [q.grad for q in model.parameters()]
            p.step(loss, gfinite=all(bool(torch.isfinite(v).all()) for v in grads), minlogit=float(out.detach().min()))
        opt.step()


NAN_STEP = 19  # first step whose gradient is non-finite (measured by the probe, --truth)

CASE = {
    "bug": "focal loss (1 - pt) ** 0.5 with pt = exp(-ce): pt == 1 gives an infinite derivative, NaN gradient",
    "source": "https://github.com/kornia/kornia/issues/918; https://github.com/fizyr/keras-retinanet/issues/706",
    "arch": "fully-convolutional dense objectness head (Conv2d x2 + 1x1 classifier), focal loss gamma 0.5",
    "kind": ["nonfinite"],
    "layer": ["<loss>", "cls"],
    "step": [NAN_STEP, NAN_STEP + 1],
}


def truth(bug, twin):
    first_g = next((i for i, r in enumerate(bug) if not r["gfinite"]), None)
    first_l = next((i for i, r in enumerate(bug) if not math.isfinite(r["loss"])), None)
    twin_ok = all(r["gfinite"] and math.isfinite(r["loss"]) for r in twin)
    lt = mean([r["loss"] for r in twin[-20:]])
    held = first_g == NAN_STEP and (first_l is None or first_l > first_g) and twin_ok and lt < 0.3 * twin[0]["loss"]
    ml = bug[first_g]["minlogit"] if first_g is not None else None
    return held, (f"bug gradient first non-finite at step {first_g} (loss finite that step; most negative logit {ml}), loss first non-finite at {first_l}; "
                  f"twin finite {twin_ok}, twin loss {twin[0]['loss']:.3g} -> {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
