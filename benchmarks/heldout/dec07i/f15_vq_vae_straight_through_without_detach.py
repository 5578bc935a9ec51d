"""A VQ-VAE whose straight-through estimator is written without ``detach()``.

Bug: ``quantized = inputs + (quantized - inputs)`` (meant ``inputs + (quantized - inputs).detach()``):
the forward value is the same, but the two paths' gradients to the encoder output cancel
(1 - 1 = 0), so the reconstruction loss sends the encoder exactly nothing: the encoder only
ever feels the commitment term; the reconstruction error stalls at ~0.7 of its start while the
twin's keeps falling (~2.5x lower at the end).
Source: https://github.com/NTU-AIoT-Lab/EfficientFi/issues/4 ("Lack of a Stop-Gradient
Operation ... written as quantized = inputs + (quantized - inputs)"),
https://github.com/zalandoresearch/pytorch-vq-vae/issues/6 (the detach is what copies the
gradient to the encoder); van den Oord et al. NeurIPS 2017 sec. 3.2.
Fixed twin: ``inputs + (quantized - inputs).detach()``.
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, series  # noqa: E402

CASE = {
    "bug": "VQ-VAE straight-through without detach: reconstruction gradient to the encoder cancels to 0",
    "source": "https://github.com/NTU-AIoT-Lab/EfficientFi/issues/4; https://github.com/zalandoresearch/pytorch-vq-vae/issues/6",
    "arch": "VQ-VAE: MLP encoder (32 -> 8), codebook of 32 codes, MLP decoder",
    "kind": ["loss_plateau", "vanishing_gradient", "no_gradient"],
    "layer": ["<loss>", "encoder", "encoder.*", "vq", "vq.*"],
    "step": [0, 150],
}


class VQ(nn.Module):
    def __init__(self, detach):
        super().__init__()
        self.codebook = nn.Embedding(32, 8)
        self.codebook.weight.data.normal_(0.0, 0.5)
        self.detach = detach

    def forward(self, z):
        idx = torch.cdist(z, self.codebook.weight).argmin(1)
        q = self.codebook(idx)
        aux = F.mse_loss(q, z.detach()) + 0.25 * F.mse_loss(z, q.detach())  # codebook + commitment
        st = z + (q - z).detach() if self.detach else z + (q - z)
        return st, aux


class VQVAE(nn.Module):
    def __init__(self, detach):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
        self.vq = VQ(detach)
        self.decoder = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 32))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    protos = torch.randn(24, 32, generator=g)
    model = VQVAE(detach=fixed)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        x = protos[torch.randint(0, 24, (128,), generator=g)] + 0.1 * torch.randn(128, 32, generator=g)
        st, aux = model.vq(model.encoder(x))
        recon = F.mse_loss(model.decoder(st), x)
        loss = recon + aux
        opt.zero_grad()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss, recon=float(recon.detach()))
        opt.step()


def truth(bug, twin):
    rb, rt = mean([r["recon"] for r in bug[-30:]]), mean([r["recon"] for r in twin[-30:]])
    r0 = bug[0]["recon"]
    gb, gt = mean(series(bug, "grad", "encoder.0")), mean(series(twin, "grad", "encoder.0"))
    held = rb > 2 * rt and rb > 0.6 * r0 and gb < 0.1 * gt
    return held, f"reconstruction MSE start {r0:.3g}, last-30 bug {rb:.3g} twin {rt:.3g}; encoder.0 mean grad norm bug {gb:.3g} twin {gt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
