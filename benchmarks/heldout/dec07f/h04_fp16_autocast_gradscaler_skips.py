"""Healthy: float16 autocast with a GradScaler on CPU, started at a huge scale (2**32).

Fools: the first steps' scaled gradients overflow to inf, the scaler skips those optimizer steps
and halves its scale until it fits, so the first updates are missing and the scale collapses by
orders of magnitude at the start; then training is normal (fp32 master weights, done right).
Source of the recipe: torch.amp docs (GradScaler: "skips optimizer.step() if the gradients contain
infs or NaNs", init_scale, backoff_factor); Micikevicius et al. ICLR 2018 (loss scaling).
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "GradScaler from 2**32: inf gradients and skipped steps at the start, scale x1/2 each",
        "source": "torch.amp.GradScaler docs; Micikevicius et al. ICLR 2018", "arch": "CNN classifier under fp16 autocast"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.GELU(), nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.GELU(),
                          nn.Flatten(), nn.Linear(16 * 6 * 6, 4))
    proto = torch.randn(4, 1, 12, 12, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 32)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit, scaler=scaler)
    p = probe(model) if probe else None
    for _ in range(150):
        y = torch.randint(0, 4, (32,), generator=g)
        x = proto[y] + 1.5 * torch.randn(32, 1, 12, 12, generator=g)
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = crit(model(x), y)
        scaler.scale(loss).backward()
        if p:
            p.step(loss, scale=float(scaler.get_scale()))
        scaler.step(opt)
        scaler.update()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.5)
    s0, s1 = bug[0]["scale"], bug[-1]["scale"]
    inf_steps = sum(1 for r in bug[:40] if not all(v is None or math.isfinite(v) for v in r["grad"].values()))
    return fell and s1 < s0 / 100 and inf_steps >= 3, f"{said}; scale {s0:.3g} -> {s1:.3g}; steps with inf grads in the first 40: {inf_steps}"


if __name__ == "__main__":
    sys.exit(main(globals()))
