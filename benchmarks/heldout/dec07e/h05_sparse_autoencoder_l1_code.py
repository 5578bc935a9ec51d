"""Healthy: a sparse autoencoder whose ReLU code is mostly zeros on purpose (L1 activity penalty).

An overcomplete ReLU code (64 units for 32-d inputs built from 8 active dictionary atoms of 64) is
pushed to sparsity by an L1 penalty on its activations: on any one input ~60 % of the code units
are exactly 0, yet every unit fires for some inputs (none is dead) and the reconstruction error falls.
Source: Ng, "Sparse autoencoder", CS294A lecture notes (Stanford 2011), sec. 3; Olshausen & Field,
Nature 1996 (sparse coding); Bricken et al. 2023 "Towards Monosemanticity" (ReLU SAE with an L1
penalty on the code).
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "healthy": True,
    "bug": "sparse autoencoder: ReLU code ~60 % zeros per input from an L1 penalty, no unit dead",
    "source": "Ng, Sparse autoencoder, CS294A notes sec. 3; Bricken et al. 2023 (Towards Monosemanticity)",
    "arch": "Linear 32 -> 64 ReLU code -> Linear 64 -> 32, L1 on the code",
}


class SparseAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(32, 64)
        self.code = nn.ReLU()
        self.dec = nn.Linear(64, 32)

    def forward(self, x):
        c = self.code(self.enc(x))
        return self.dec(c), c


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    atoms = F.normalize(torch.randn(64, 32, generator=g), dim=1)
    model = SparseAE()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model, acts=("code",)) if probe else None
    for _ in range(250):
        idx = torch.rand(128, 64, generator=g).argsort(1)[:, :8]
        coef = torch.zeros(128, 64).scatter_(1, idx, torch.rand(128, 8, generator=g) + 0.5)
        x = coef @ atoms
        opt.zero_grad()
        x_hat, c = model(x)
        recon = F.mse_loss(x_hat, x)
        loss = recon + 1e-2 * c.abs().sum(1).mean()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            fired = float((c.detach() > 0).any(0).float().mean())
            p.step(loss, recon=float(recon.detach()), fired=fired)
        opt.step()


def truth(bug, twin):
    r0 = mean([r["recon"] for r in bug[:10]])
    r1 = mean([r["recon"] for r in bug[-20:]])
    zero = mean([r["act"]["code"]["zero"] for r in bug[-20:]])
    fired = min(r["fired"] for r in bug[-20:])
    held = r1 < 0.3 * r0 and zero > 0.55 and fired > 0.9
    return held, (f"reconstruction mse first-10 {r0:.3g} -> last-20 {r1:.3g}; code zero fraction {zero:.3g}; "
                  f"fraction of units that fire in a batch (min over last 20) {fired:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
