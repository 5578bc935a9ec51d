"""Healthy: a VAE with 16 latent dimensions on data that has only 2 underlying factors.

What looks wrong: most latent dimensions "collapse" to the prior (their KL is ~0, their posterior
mean stops depending on the input), as they should when the data does not need them; the
encoder's mean and log-variance outputs for those dimensions go flat across samples, while the
negative ELBO (Gaussian decoder with learned variance) keeps falling.
Source: Burda et al. ICLR 2016 "Importance Weighted Autoencoders" sec. 5.2 (inactive units);
Kingma & Welling ICLR 2014.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {"healthy": True, "what": "VAE: 14 of 16 latents inactive (KL ~ 0, outputs flat across samples) on purpose",
        "source": "Burda et al. ICLR 2016 sec. 5.2 (active units); Kingma & Welling ICLR 2014",
        "arch": "MLP VAE (20-D data from 2 factors, 16 latents, Gaussian decoder with learned variance)"}


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(20, 64), nn.Tanh())
        self.mu = nn.Linear(64, 16)
        self.logvar = nn.Linear(64, 16)
        self.dec = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 20))
        self.dec_logvar = nn.Parameter(torch.zeros(20))

    def forward(self, x, eps):
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + eps * torch.exp(0.5 * logvar)
        return self.dec(z), mu, logvar


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    mix = torch.randn(2, 20, generator=g)
    model = VAE()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(250):
        f = torch.randn(128, 2, generator=g)
        x = torch.tanh(f @ mix) + 0.05 * torch.randn(128, 20, generator=g)
        recon, mu, logvar = model(x, torch.randn(128, 16, generator=g))
        nll = 0.5 * (((x - recon) ** 2) / model.dec_logvar.exp() + model.dec_logvar + math.log(2 * math.pi)).sum(1).mean()
        kl_dim = 0.5 * (mu ** 2 + logvar.exp() - 1 - logvar).mean(0)
        loss = nll + kl_dim.sum()
        opt.zero_grad()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss, active=int((mu.detach().var(0) > 0.01).sum()), kl=[float(k) for k in kl_dim.detach()])
        opt.step()


def truth(bug, twin):
    l0, l1 = mean([r["loss"] for r in bug[:10]]), mean([r["loss"] for r in bug[-20:]])
    active = bug[-1]["active"]
    return l1 < 0.75 * l0 and 1 <= active <= 4, f"loss first-10 {l0:.3g} -> last-20 {l1:.3g}; active latent units at the end {active}/16 (data has 2 factors)"


if __name__ == "__main__":
    sys.exit(main(globals()))
