"""A two-tower retrieval model with sparse embeddings (SparseAdam): most rows get no gradient each step.

Healthy, built to fool: 2000 items and 1000 users as ``nn.Embedding(sparse=True)`` trained by
SparseAdam with an in-batch softmax; a step touches at most 128 rows of each table (<13%), the
other rows have no gradient and do not move; the loss starts above ln 128, sits near it for
~150 steps while the rarely-seen rows catch up, then falls.
Source: https://pytorch.org/docs/stable/generated/torch.optim.SparseAdam.html; Yi et al. RecSys
2019 (in-batch softmax for two-tower retrieval).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "what": "sparse embedding tables (SparseAdam): <13% of rows touched per step, in-batch softmax",
        "source": "https://pytorch.org/docs/stable/generated/torch.optim.SparseAdam.html; Yi et al. RecSys 2019",
        "arch": "two-tower retrieval (sparse user/item embeddings + linear towers)"}

U, I = 1000, 2000


class TwoTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.user_emb = nn.Embedding(U, 32, sparse=True)
        self.item_emb = nn.Embedding(I, 32, sparse=True)
        self.user_tower = nn.Linear(32, 32)
        self.item_tower = nn.Linear(32, 32)

    def forward(self, u, i):
        a = nn.functional.normalize(self.user_tower(self.user_emb(u)), dim=-1)
        b = nn.functional.normalize(self.item_tower(self.item_emb(i)), dim=-1)
        return a @ b.T / 0.1


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    taste = torch.randint(0, 64, (U,), generator=g)  # each user likes one of 64 item clusters
    cluster = torch.randint(0, 64, (I,), generator=g)
    by_cluster = [torch.nonzero(cluster == c).squeeze(1) for c in range(64)]
    model = TwoTower()
    sparse = [model.user_emb.weight, model.item_emb.weight]
    dense = [p for n, p in model.named_parameters() if "emb" not in n]
    opt = torch.optim.SparseAdam(sparse, lr=0.1)
    opt_dense = torch.optim.Adam(dense, lr=1e-2)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(250):
        u = torch.randint(0, U, (128,), generator=g)
        i = torch.stack([by_cluster[int(c)][torch.randint(0, len(by_cluster[int(c)]), (1,), generator=g)][0]
                         for c in taste[u]])
        opt.zero_grad()
        opt_dense.zero_grad()
        loss = crit(model(u, i), torch.arange(128))
        loss.backward()
        if p:
            p.step(loss)
        opt_dense.step()
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.7)


if __name__ == "__main__":
    sys.exit(main(globals()))
