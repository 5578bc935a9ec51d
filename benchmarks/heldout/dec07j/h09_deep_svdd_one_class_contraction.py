"""Healthy: Deep SVDD one-class anomaly detection: the features are pulled to a fixed centre on purpose.

Fools: the objective is the mean squared distance of the (bias-free) network's outputs to a fixed
centre c, so the outputs contract toward one point and their spread across samples shrinks by
orders of magnitude: a "collapse" by design. The loss falls by orders of magnitude, and the distances
still separate held-out anomalies from normal samples (AUC ~0.2 at step 0, ~0.85 at the end).
Source of the recipe: Ruff et al. ICML 2018, "Deep One-Class Classification" sec. 3.1 (one-class
Deep SVDD, no bias terms, c fixed from an initial forward pass).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "outputs contract toward a fixed centre by design (Deep SVDD); bias-free layers",
        "source": "Ruff et al. ICML 2018 sec. 3.1", "arch": "bias-free MLP (tabular one-class anomaly detection)"}


def _normal(g, basis, n):
    return torch.randn(n, 4, generator=g) @ basis + 0.05 * torch.randn(n, 20, generator=g)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    basis = torch.randn(4, 20, generator=g)
    model = nn.Sequential(nn.Linear(20, 64, bias=False), nn.LeakyReLU(0.1), nn.Linear(64, 32, bias=False),
                          nn.LeakyReLU(0.1), nn.Linear(32, 8, bias=False))
    with torch.no_grad():
        c = model(_normal(g, basis, 512)).mean(0)
    xv = _normal(g, basis, 300)
    xa = torch.randn(300, 20, generator=g) * basis.std()  # anomalies: off the normal data's 4-d subspace
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-6)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        x = _normal(g, basis, 128)
        opt.zero_grad()
        loss = (model(x) - c).pow(2).sum(1).mean()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            with torch.no_grad():
                dn = (model(xv) - c).pow(2).sum(1)
                da = (model(xa) - c).pow(2).sum(1)
                auc = float((da.view(-1, 1) > dn.view(1, -1)).float().mean())
            p.step(loss, auc=auc)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.2)
    auc0, auc = bug[0]["auc"], bug[-1]["auc"]
    return fell and auc > 0.8, f"{said}; held-out anomaly AUC at step 0 {auc0:.3f}, at the end {auc:.3f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
