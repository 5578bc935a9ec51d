"""Healthy: a metric-learning embedder (L2-normalised) trained with a triplet margin loss on
semi-hard negatives; most triplets already satisfy the margin after a few dozen steps.

What looks wrong: the per-step loss is exactly 0 for most triplets and small and spiky in the
batch mean; most samples contribute no gradient on a given step (sparse gradients), while
nearest-neighbour retrieval keeps improving.
Source: Schroff et al. CVPR 2015 (FaceNet) sec. 3.2 (semi-hard negatives);
torch.nn.TripletMarginLoss; https://github.com/KevinMusgrave/pytorch-metric-learning (miners).
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {"healthy": True, "what": "triplet loss zero for most triplets: sparse gradients, spiky small loss",
        "source": "Schroff et al. CVPR 2015 sec. 3.2; torch.nn.TripletMarginLoss",
        "arch": "MLP embedder (32 -> 64 -> 16, L2-normalised), 10 identities"}


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16))

    def forward(self, x):
        return F.normalize(self.net(x), dim=1)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    centres = torch.randn(10, 32, generator=g)
    model = Embed()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.TripletMarginLoss(margin=0.2, reduction="none")
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        y = torch.randint(0, 10, (128,), generator=g)
        x = centres[y] + 1.2 * torch.randn(128, 32, generator=g)
        e = model(x)
        with torch.no_grad():  # semi-hard mining: positive = same id, negative = closest other id beyond the positive
            d = torch.cdist(e, e)
            same = y[:, None] == y[None]
            d_pos = torch.where(same & ~torch.eye(128, dtype=torch.bool), d, torch.full_like(d, -1.0))
            pos = d_pos.argmax(1)
            dp = d[torch.arange(128), pos]
            cand = torch.where(~same & (d > dp[:, None]), d, torch.full_like(d, 1e9))
            neg = cand.argmin(1)
            neg = torch.where(cand.min(1)[0] < 1e9, neg, torch.where(~same, d, torch.full_like(d, 1e9)).argmin(1))
        per = crit(e, e[pos], e[neg])
        loss = per.mean()
        opt.zero_grad()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            with torch.no_grad():
                dd = torch.cdist(e, e) + torch.eye(128) * 1e9
                nn_acc = float((y[dd.argmin(1)] == y).float().mean())
            p.step(loss, zero=float((per == 0).float().mean()), acc=nn_acc)
        opt.step()


def truth(bug, twin):
    a0, a1 = mean([r["acc"] for r in bug[:5]]), mean([r["acc"] for r in bug[-20:]])
    z = mean([r["zero"] for r in bug[-50:]])
    ok = a1 > a0 + 0.15 and a1 > 0.8 and z > 0.5
    return ok, f"1-NN retrieval accuracy first-5 {a0:.3f} -> last-20 {a1:.3f}; fraction of triplets with zero loss last-50 {z:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
