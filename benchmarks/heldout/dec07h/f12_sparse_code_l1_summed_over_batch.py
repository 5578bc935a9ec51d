"""A sparse autoencoder whose L1 penalty is summed over the batch instead of averaged: every code dies.

Bug: ``l1 * code.abs().sum()`` where the coefficient was tuned for the per-sample penalty
``code.abs().sum(1).mean()``: with a batch of 256 the penalty is 256x too strong. It drives the
ReLU code units below zero one after another (over 90% dead by step ~30, all by ~140; a dead unit
gets gradient 0 for good), and the decoder falls back to the mean input.
Source: https://transformer-circuits.pub/2023/monosemantic-features (the L1 coefficient is per
sample; too strong a penalty leaves dead features); Humbatova et al. ICSE 2020, 'Wrong loss function
calculation' (a reduction that scales the term with the batch).
Fixed twin: the penalty averaged over the batch.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "sparse autoencoder L1 penalty summed over a batch of 256 instead of averaged: every code unit dies",
    "source": "https://transformer-circuits.pub/2023/monosemantic-features; Humbatova et al. ICSE 2020 'Wrong loss function calculation'",
    "arch": "sparse autoencoder (Linear 64->256, ReLU code, Linear 256->64)",
    "kind": ["dead_activation", "activation_collapse", "vanishing_gradient", "no_gradient"],
    "layer": ["code", "enc"],
    "step": [0, 140],
}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential()
    model.add_module("enc", nn.Linear(64, 256))
    model.add_module("code", nn.ReLU())
    model.add_module("dec", nn.Linear(256, 64))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model, acts=("code",)) if probe else None
    dictionary = torch.randn(40, 64, generator=g)
    l1 = 1e-2
    for _ in range(200):
        coef = torch.relu(torch.randn(256, 40, generator=g) - 1.0)  # sparse non-negative mixtures
        x = coef @ dictionary
        opt.zero_grad()
        h = model.code(model.enc(x))
        recon = ((model.dec(h) - x) ** 2).mean()
        pen = h.abs().sum(1).mean() if fixed else h.abs().sum()
        loss = recon + l1 * pen
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss, recon=float(recon.detach()), var=float(x.var()))
        opt.step()


def truth(bug, twin):
    zb = [r["act"]["code"]["zero"] for r in bug]
    dead = next((i for i, z in enumerate(zb) if z > 0.995), None)
    zt = max(r["act"]["code"]["zero"] for r in twin)
    rb, rt = mean([r["recon"] for r in bug[-20:]]), mean([r["recon"] for r in twin[-20:]])
    held = dead is not None and dead <= 140 and zb[60] > 0.95 and zt < 0.9 and rb > 3 * rt
    return held, (f"bug code zero fraction step 60 {zb[60]:.3f}, > 0.995 from step {dead}; twin max zero fraction {zt:.3f}; "
                  f"last-20 reconstruction MSE bug {rb:.3g} twin {rt:.3g} (input variance {bug[-1]['var']:.3g})")


if __name__ == "__main__":
    sys.exit(main(globals()))
