"""A diffusion denoiser trained to predict a FRESH noise sample instead of the noise that was added.

Bug: the noisy input is built with one draw ``eps`` (x_t = sqrt(ab) x0 + sqrt(1-ab) eps), but the loss
is ``mse(eps_hat, torch.randn_like(eps_hat))``: the target is independent of the input, the best
prediction is 0, and the loss sits at the target's variance (~1) for ever; the network learns nothing.
Source: public tutorial code found by code search, ``loss = F.mse_loss(noise_pred,
torch.randn_like(noise_pred))`` after ``noise = torch.randn_like(image); noisy = scheduler.add_noise(
image, noise, t)`` (a T-LoRA personalisation walk-through); Ho, Jain & Abbeel NeurIPS 2020,
Algorithm 1 (the target is the same eps that made x_t).
Fixed twin: the loss against the eps used to build x_t.
"""

import math
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "diffusion loss against torch.randn_like(pred) (a fresh draw) instead of the eps added to x_t",
    "source": "public T-LoRA tutorial code (F.mse_loss(noise_pred, torch.randn_like(noise_pred))); Ho et al. NeurIPS 2020 Alg. 1",
    "arch": "MLP eps-prediction denoiser with sinusoidal time embedding (16-d data on 4 clusters)",
    "kind": ["loss_plateau", "activation_collapse"],
    "layer": ["<loss>", "out"],
    "step": [0, 60],
}

T = 100


class Denoiser(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16 + 16, 128)
        self.act1 = nn.SiLU()
        self.mid = nn.Linear(128, 128)
        self.act2 = nn.SiLU()
        self.out = nn.Linear(128, 16)

    def forward(self, x, t):
        freqs = torch.exp(-math.log(1000) * torch.arange(8) / 8)
        ang = t[:, None].float() * freqs[None]
        emb = torch.cat([ang.sin(), ang.cos()], 1)
        return self.out(self.act2(self.mid(self.act1(self.inp(torch.cat([x, emb], 1))))))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    centres = torch.randn(4, 16, generator=g) * 1.5
    abar = torch.cumprod(1 - torch.linspace(1e-3, 0.2, T), 0)
    model = Denoiser()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model, acts=("out",)) if probe else None
    for _ in range(200):
        x0 = centres[torch.randint(0, 4, (128,), generator=g)] + 0.1 * torch.randn(128, 16, generator=g)
        t = torch.randint(0, T, (128,), generator=g)
        eps = torch.randn(128, 16, generator=g)
        a = abar[t][:, None]
        xt = a.sqrt() * x0 + (1 - a).sqrt() * eps
        opt.zero_grad()
        pred = model(xt, t)
        target = eps if fixed else torch.randn_like(pred)
        loss = F.mse_loss(pred, target)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    ob = mean([r["act"]["out"]["std"] for r in bug[-30:]])
    ot = mean([r["act"]["out"]["std"] for r in twin[-30:]])
    held = lb > 0.95 and lt < 0.6 * lb and ob < 0.2 * ot
    return held, f"last-30 loss bug {lb:.3g} twin {lt:.3g}; std of the prediction bug {ob:.3g} twin {ot:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
