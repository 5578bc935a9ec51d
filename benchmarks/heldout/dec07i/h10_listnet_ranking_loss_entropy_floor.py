"""Healthy: a learning-to-rank scorer trained with ListNet (softmax cross-entropy between the
graded-relevance distribution and the scores' softmax over each query's 20 documents).

What looks wrong: the loss is a cross-entropy against a SOFT target, so its minimum is the target
distribution's entropy (~2.5 here), not 0: it starts near ln 20 = 3.0, falls by only ~13 % and
then sits on a high floor while the ranking (NDCG) keeps improving.
Source: Cao et al. ICML 2007 "Learning to Rank: From Pairwise Approach to Listwise Approach"
(ListNet, top-one probability); https://github.com/allegro/allRank (listNet loss).
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {"healthy": True, "what": "ListNet soft-target loss: high floor (target entropy), small relative fall",
        "source": "Cao et al. ICML 2007 (ListNet); https://github.com/allegro/allRank",
        "arch": "MLP document scorer (24 features), 20 documents per query"}

Q, N, F_ = 32, 20, 24


def ndcg(scores, rel, k=10):
    order = scores.argsort(1, descending=True)[:, :k]
    gains = (2 ** rel.gather(1, order) - 1) / torch.log2(torch.arange(2, k + 2).float())
    ideal = (2 ** rel.sort(1, descending=True)[0][:, :k] - 1) / torch.log2(torch.arange(2, k + 2).float())
    return float((gains.sum(1) / ideal.sum(1).clamp(min=1e-9)).mean())


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    w_true = torch.randn(F_, generator=g)
    model = nn.Sequential(nn.Linear(F_, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randn(Q, N, F_, generator=g)
        latent = x @ w_true / math.sqrt(F_) + 0.3 * torch.randn(Q, N, generator=g)
        rel = torch.bucketize(latent, torch.tensor([-0.5, 0.3, 1.0])).float()  # grades 0-3
        scores = model(x).squeeze(-1)
        target = torch.softmax(rel, 1)
        loss = -(target * torch.log_softmax(scores, 1)).sum(1).mean()
        opt.zero_grad()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            ent = float(-(target * target.log()).sum(1).mean())
            p.step(loss, ndcg=ndcg(scores.detach(), rel), floor=ent)
        opt.step()


def truth(bug, twin):
    n0, n1 = mean([r["ndcg"] for r in bug[:10]]), mean([r["ndcg"] for r in bug[-20:]])
    l0, l1 = mean([r["loss"] for r in bug[:10]]), mean([r["loss"] for r in bug[-20:]])
    floor = mean([r["floor"] for r in bug[-20:]])
    ok = n1 > n0 + 0.2 and l1 < l0 and l1 - floor < 0.3 * (l0 - floor)
    return ok, f"NDCG@10 first-10 {n0:.3f} -> last-20 {n1:.3f}; loss {l0:.3g} -> {l1:.3g} (floor = target entropy {floor:.3g})"


if __name__ == "__main__":
    sys.exit(main(globals()))
