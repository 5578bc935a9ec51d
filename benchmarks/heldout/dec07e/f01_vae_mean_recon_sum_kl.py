"""A VAE whose reconstruction term is averaged over pixels while the KL term is summed: posterior collapse.

Bug: ``F.mse_loss(x_hat, x)`` (mean over the batch AND the 64 pixels) is added to the KL divergence
summed over the latent dimensions. The reconstruction term is 64x too weak against the KL term, so the
cheapest solution is q(z|x) = prior: the encoder's means go to 0 for every input, the decoder
outputs the mean image, and reconstruction stays at the data variance.
Source: https://github.com/AppliedDataSciencePartners/WorldModels/issues/12 (posterior collapse, KL
~1e-7, fixed by summing the reconstruction loss over dimensions as the original code does) and
https://github.com/AppliedDataSciencePartners/WorldModels/issues/2.
Fixed twin: the reconstruction error summed over pixels, averaged over the batch.
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "VAE loss = mse_loss(mean over pixels) + KL summed over latents: KL dominates, posterior collapse",
    "source": "https://github.com/AppliedDataSciencePartners/WorldModels/issues/12",
    "arch": "MLP VAE (64-pixel inputs, 8 latents)",
    "kind": ["activation_collapse", "loss_plateau", "vanishing_gradient"],
    "layer": ["fc_mu", "fc_logvar", "<loss>"],
    "step": [0, 80],
}


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(64, 64)
        self.enc_act = nn.ReLU()
        self.fc_mu = nn.Linear(64, 8)
        self.fc_logvar = nn.Linear(64, 8)
        self.dec1 = nn.Linear(8, 64)
        self.dec_act = nn.ReLU()
        self.dec2 = nn.Linear(64, 64)

    def forward(self, x):
        h = self.enc_act(self.enc(x))
        mu, logvar = self.fc_mu(h), self.fc_logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec2(self.dec_act(self.dec1(z))), mu, logvar


def batch(g, mix, n=64):
    z = torch.randn(n, 4, generator=g)
    return torch.tanh(z @ mix) + 0.05 * torch.randn(n, 64, generator=g)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    mix = torch.randn(4, 64, generator=g)
    model = VAE()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model, acts=("fc_mu",)) if probe else None
    for _ in range(200):
        x = batch(g, mix)
        opt.zero_grad()
        x_hat, mu, logvar = model(x)
        kl = (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(1)).mean()
        if fixed:
            recon = F.mse_loss(x_hat, x, reduction="none").sum(1).mean()
        else:
            recon = F.mse_loss(x_hat, x)
        loss = recon + kl
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss, mse=float(F.mse_loss(x_hat, x).detach()), kl=float(kl.detach()))
        opt.step()


def truth(bug, twin):
    sb = mean([r["act"]["fc_mu"]["std"] for r in bug[-30:]])
    st = mean([r["act"]["fc_mu"]["std"] for r in twin[-30:]])
    mb = mean([r["mse"] for r in bug[-30:]])
    mt = mean([r["mse"] for r in twin[-30:]])
    kb = mean([r["kl"] for r in bug[-30:]])
    held = sb < 0.1 * st and mb > 3 * mt and kb < 0.05
    return held, (f"last-30 std of fc_mu outputs bug {sb:.3g} twin {st:.3g}; per-pixel mse bug {mb:.3g} "
                  f"twin {mt:.3g}; bug KL {kb:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
