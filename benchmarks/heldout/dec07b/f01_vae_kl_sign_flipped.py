"""A small MLP VAE whose KL term lost its minus sign: the loss rewards large log-variances and means.

Bug: ``kl = 0.5 * sum(1 + logvar - mu^2 - exp(logvar))`` is added to the loss (the closed form of
-KL, Kingma & Welling appendix B, used without its leading minus): minimising it drives ``mu`` and
``logvar`` away without bound: the loss falls to about -1e21 within 60 steps while |mu| and
|logvar| grow ~100x (measured with the probe: no NaN, a loss that runs away).
Source: masa-su/Tars PR #7 "Fix the NaN error in VAEGAN" (KL sign fixed,
https://github.com/masa-su/Tars/pull/7); FluxML/model-zoo PR #147 (sign of the KL in vae.jl,
https://github.com/FluxML/model-zoo/pull/147); pytorch/examples issue #824 on the sign.
Fixed twin: ``kl = -0.5 * sum(...)``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, series  # noqa: E402

CASE = {
    "bug": "VAE KL term added with the wrong sign: logvar and mu driven without bound, loss to -1e21",
    "source": "https://github.com/masa-su/Tars/pull/7; https://github.com/FluxML/model-zoo/pull/147",
    "arch": "MLP variational autoencoder (16-d data, 4-d latent)",
    "kind": ["nonfinite", "activation_explosion", "exploding_gradient", "loss_spike"],
    "layer": ["fc_logvar", "fc_mu", "<loss>"],
    "step": [0, 60],
}


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(16, 32)
        self.fc_mu, self.fc_logvar = nn.Linear(32, 4), nn.Linear(32, 4)
        self.dec1, self.dec2 = nn.Linear(4, 32), nn.Linear(32, 16)

    def forward(self, x):
        h = torch.relu(self.enc(x))
        mu, logvar = self.fc_mu(h), self.fc_logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec2(torch.relu(self.dec1(z))), mu, logvar


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    centers = torch.randn(3, 16, generator=g) * 2
    model = VAE()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model, acts=("fc_logvar", "fc_mu")) if probe else None
    sign = -1.0 if fixed else 1.0
    for _ in range(200):
        x = centers[torch.randint(0, 3, (64,), generator=g)] + 0.3 * torch.randn(64, 16, generator=g)
        opt.zero_grad()
        rec, mu, logvar = model(x)
        kl = sign * 0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(1).mean()
        loss = (rec - x).pow(2).sum(1).mean() + kl
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    scale = max(abs(r["loss"]) for r in twin)
    first = next((i for i, r in enumerate(bug) if not abs(r["loss"]) < 1e4 * scale), None)
    lv_bug = series(bug, "act", "fc_logvar", "maxabs")
    lv_twin = series(twin, "act", "fc_logvar", "maxabs")
    grow = max(v for v in lv_bug if v is not None) / max(v for v in lv_twin if v is not None)
    twin_ok = all(r["loss"] == r["loss"] for r in twin)
    held = first is not None and first <= 60 and grow > 10 and twin_ok
    return held, (f"bug |loss| first > 1e4 x twin's max |loss| ({scale:.3g}) at step {first}, last {bug[-1]['loss']:.3g}; "
                  f"max|logvar| bug/twin {grow:.3g}; twin finite: {twin_ok}")


if __name__ == "__main__":
    sys.exit(main(globals()))
