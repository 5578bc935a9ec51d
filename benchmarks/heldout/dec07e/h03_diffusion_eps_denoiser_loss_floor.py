"""Healthy: an eps-prediction diffusion denoiser whose loss falls, then stays at a high irreducible floor.

The denoiser is trained on all timesteps of a 100-step schedule. At large t the noisy input is nearly
pure noise, and the noise it must predict is almost fully determined by it (eps ~ x_t), while at
small t eps is a tiny perturbation of x0 that cannot be guessed exactly: the mean loss plateaus far
above 0 (around 0.1-0.3 of its starting value) although the model is as good as it can be.
Sample quality is checked through the denoised x0 estimate on mid timesteps.
Source: Ho, Jain & Abbeel, "Denoising Diffusion Probabilistic Models", NeurIPS 2020, Algorithm 1 and
sec. 3.2; Nichol & Dhariwal ICML 2021 fig. 2 (the loss terms per timestep: large at small t).
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
    "healthy": True,
    "bug": "eps-prediction denoiser: loss falls then plateaus at an irreducible floor well above 0",
    "source": "Ho et al. NeurIPS 2020 Alg. 1; Nichol & Dhariwal ICML 2021 fig. 2",
    "arch": "MLP denoiser with sinusoidal time embedding, 8-d data on a ring of 6 clusters, GELU",
}

T = 100


class Denoiser(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8 + 16, 96)
        self.act1 = nn.GELU()
        self.mid = nn.Linear(96, 96)
        self.act2 = nn.GELU()
        self.out = nn.Linear(96, 8)

    def forward(self, x, t):
        freqs = torch.exp(-math.log(1000) * torch.arange(8) / 8)
        ang = t[:, None].float() * freqs[None]
        emb = torch.cat([ang.sin(), ang.cos()], 1)
        return self.out(self.act2(self.mid(self.act1(self.inp(torch.cat([x, emb], 1))))))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    basis = torch.linalg.qr(torch.randn(8, 2, generator=g))[0]
    ang = torch.arange(6) * (2 * math.pi / 6)
    centres = 2 * torch.stack([ang.cos(), ang.sin()], 1) @ basis.t()
    abar = torch.cumprod(1 - torch.linspace(1e-4, 0.1, T), 0)
    model = Denoiser()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(220):
        x0 = centres[torch.randint(0, 6, (128,), generator=g)] + 0.05 * torch.randn(128, 8, generator=g)
        t = torch.randint(0, T, (128,), generator=g)
        eps = torch.randn(128, 8, generator=g)
        a = abar[t][:, None]
        xt = a.sqrt() * x0 + (1 - a).sqrt() * eps
        opt.zero_grad()
        pred = model(xt, t)
        loss = F.mse_loss(pred, eps)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            mid = (t > 20) & (t < 60)
            x0_hat = (xt - (1 - a).sqrt() * pred.detach()) / a.sqrt()
            err = float((x0_hat[mid] - x0[mid]).pow(2).mean())
            p.step(loss, x0_err=err)
        opt.step()


def truth(bug, twin):
    a = mean([r["loss"] for r in bug[:10]])
    b = mean([r["loss"] for r in bug[-20:]])
    e0 = mean([r["x0_err"] for r in bug[:10]])
    e1 = mean([r["x0_err"] for r in bug[-20:]])
    held = b < 0.6 * a and b > 0.02 and e1 < 0.5 * e0
    return held, f"loss first-10 {a:.3g} -> last-20 {b:.3g} (floor above 0); mid-t x0 error {e0:.3g} -> {e1:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
