"""A compression autoencoder whose latent code is quantised with torch.round: the encoder gets zero gradient.

Bug: the bottleneck is ``torch.round(z)``. Rounding is piecewise constant, so autograd's derivative is
0 everywhere: the decoder trains, but every encoder gradient is exactly zero and the encoder's
weights never move, so the code stays the random projection it was initialised with.
Source: https://discuss.pytorch.org/t/how-does-fake-quantize-per-tensor-works/169913 (round with or
without the straight-through estimator); Bengio, Leonard & Courville 2013, "Estimating or
Propagating Gradients Through Stochastic Neurons" (straight-through estimator); Theis et al. ICLR
2017 "Lossy image compression with compressive autoencoders" sec. 2.1 (rounding has zero derivative).
Fixed twin: the straight-through estimator ``z + (torch.round(z) - z).detach()``.
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "latent code quantised with torch.round (zero derivative): the encoder never receives gradient",
    "source": "https://discuss.pytorch.org/t/how-does-fake-quantize-per-tensor-works/169913; Theis et al. ICLR 2017 sec. 2.1",
    "arch": "conv compression autoencoder (1x16x16 images, 4x4x4 integer code)",
    "kind": ["no_gradient", "vanishing_gradient", "frozen_weights"],
    "layer": ["enc1", "enc2", "enc_act"],
    "step": [0, 2],
}


class CompressiveAE(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed
        self.enc1 = nn.Conv2d(1, 16, 4, stride=2, padding=1)
        self.enc_act = nn.ReLU()
        self.enc2 = nn.Conv2d(16, 4, 4, stride=2, padding=1)
        self.dec1 = nn.ConvTranspose2d(4, 16, 4, stride=2, padding=1)
        self.dec_act = nn.ReLU()
        self.dec2 = nn.ConvTranspose2d(16, 1, 4, stride=2, padding=1)

    def forward(self, x):
        z = 4 * self.enc2(self.enc_act(self.enc1(x)))
        if self.fixed:
            q = z + (torch.round(z) - z).detach()
        else:
            q = torch.round(z)
        return self.dec2(self.dec_act(self.dec1(q / 4)))


def batch(g, n=32):
    # smooth blobs: a few Gaussian bumps at random places
    yy, xx = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    c = torch.rand(n, 3, 2, generator=g) * 16
    amp = torch.rand(n, 3, generator=g) + 0.5
    d = (yy[None, None] - c[..., 0, None, None]) ** 2 + (xx[None, None] - c[..., 1, None, None]) ** 2
    return (amp[..., None, None] * torch.exp(-d / 8)).sum(1, keepdim=True)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = CompressiveAE(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(160):
        x = batch(g)
        opt.zero_grad()
        loss = F.mse_loss(model(x), x)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    gb = max(r["grad"]["enc1"] or 0.0 for r in bug) + max(r["grad"]["enc2"] or 0.0 for r in bug)
    gt = mean([r["grad"]["enc1"] for r in twin[:20]])
    lb = mean([r["loss"] for r in bug[-20:]])
    lt = mean([r["loss"] for r in twin[-20:]])
    held = gb == 0.0 and gt > 0 and lt < 0.7 * lb
    return held, (f"max encoder grad norm over all steps bug {gb:.3g}, twin first-20 enc1 grad {gt:.3g}; "
                  f"last-20 loss bug {lb:.3g} twin {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
