"""Healthy: a VAE whose KL weight is annealed from 0 to 1 over the first 120 steps.

Fools: the total loss *rises* for a stretch as the KL weight grows (reconstruction keeps
improving while the KL term is phased in), then falls; the logvar head moves a lot early.
Source of the recipe: Bowman et al. CoNLL 2016 sec. 3.1 (KL cost annealing); Kingma & Welling
ICLR 2014 (the VAE).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {"healthy": True, "fools": "the loss rises while the KL weight is annealed 0 -> 1, then falls",
        "source": "Bowman et al. CoNLL 2016 sec. 3.1", "arch": "MLP variational autoencoder (KL annealing)"}


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(16, 64)
        self.fc_mu, self.fc_logvar = nn.Linear(64, 4), nn.Linear(64, 4)
        self.dec1, self.dec2 = nn.Linear(4, 64), nn.Linear(64, 16)

    def forward(self, x):
        h = torch.relu(self.enc(x))
        mu, logvar = self.fc_mu(h), self.fc_logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec2(torch.relu(self.dec1(z))), mu, logvar


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    basis = torch.randn(3, 16, generator=g)
    model = VAE()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for step in range(250):
        x = torch.randn(64, 3, generator=g) @ basis + 0.1 * torch.randn(64, 16, generator=g)
        beta = min(1.0, step / 120)
        opt.zero_grad()
        rec, mu, logvar = model(x)
        recon = (rec - x).pow(2).sum(1).mean()
        kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(1).mean()
        loss = recon + beta * kl
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss, recon=recon.item())
        opt.step()


def truth(bug, twin):
    r0, r1 = mean([r["recon"] for r in bug[:10]]), mean([r["recon"] for r in bug[-20:]])
    l0, l1 = mean([r["loss"] for r in bug[:10]]), mean([r["loss"] for r in bug[-20:]])
    trough = min(mean([r["loss"] for r in bug[i:i + 5]]) for i in range(0, 60))
    bump = max(mean([r["loss"] for r in bug[i:i + 5]]) for i in range(60, 150))
    held = r1 < 0.5 * r0 and l1 < l0 and bump > trough
    return held, (f"recon first-10 {r0:.3g} -> last-20 {r1:.3g}; loss first-10 {l0:.3g} -> last-20 {l1:.3g}; "
                  f"5-step loss min before 60 {trough:.3g}, max 60-150 {bump:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
