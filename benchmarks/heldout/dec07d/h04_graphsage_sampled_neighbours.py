"""Healthy: a GraphSAGE-style node classifier with mean aggregation over freshly sampled neighbours.

Fools: every step samples a different 5-neighbour subset per node and a different mini-batch of
target nodes, so gradients are noisy and the loss jumps from step to step; nodes of degree 0
aggregate a zero vector; degrees range over two orders of magnitude (a power-law graph).
Source of the recipe: Hamilton et al., "Inductive Representation Learning on Large Graphs"
(GraphSAGE), NeurIPS 2017, Algorithm 2 (mini-batch with sampled neighbourhoods).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "resampled neighbourhoods each step: noisy loss; power-law degrees; isolated nodes",
        "source": "Hamilton et al. NeurIPS 2017 (GraphSAGE) Alg. 2", "arch": "2-layer GraphSAGE (mean), 4 classes"}

N, F, S = 600, 12, 5


class SAGE(nn.Module):
    def __init__(self):
        super().__init__()
        self.self1, self.neigh1 = nn.Linear(F, 32), nn.Linear(F, 32, bias=False)
        self.self2, self.neigh2 = nn.Linear(32, 32), nn.Linear(32, 32, bias=False)
        self.head = nn.Linear(32, 4)

    def layer(self, h, nbr, lin_self, lin_neigh):
        valid = (nbr >= 0).float().unsqueeze(-1)
        agg = (h[nbr.clamp(min=0)] * valid).sum(1) / valid.sum(1).clamp(min=1)
        return torch.relu(lin_self(h) + lin_neigh(agg))

    def forward(self, x, nbr):
        h = self.layer(x, nbr, self.self1, self.neigh1)
        h = self.layer(h, nbr, self.self2, self.neigh2)
        return self.head(h)


def graph(g):
    comm = torch.randint(0, 4, (N,), generator=g)
    weight = (torch.rand(N, generator=g) + 0.02) ** -1.5  # power-law-ish attachment weights
    edges = []
    for v in range(N):
        k = int(torch.poisson(torch.tensor(3.0), generator=g))
        for _ in range(k):
            same = torch.rand(1, generator=g).item() < 0.8
            pool = (comm == comm[v]) if same else (comm != comm[v])
            w = weight * pool.float()
            edges.append((v, int(torch.multinomial(w, 1, generator=g))))
    adj = [[] for _ in range(N)]
    for a, b in edges:
        adj[a].append(b)
        adj[b].append(a)
    x = torch.randn(N, F, generator=g)
    x[:, :4] += 0.4 * nn.functional.one_hot(comm, 4).float()
    return x, comm, adj


def sample(adj, g):
    nbr = torch.full((N, S), -1, dtype=torch.long)
    for v, ns in enumerate(adj):
        if ns:
            pick = torch.randint(0, len(ns), (S,), generator=g)
            nbr[v] = torch.tensor(ns)[pick]
    return nbr


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x, y, adj = graph(g)
    model = SAGE()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("self1", "self2")) if probe else None
    for _ in range(150):
        nbr = sample(adj, g)
        batch = torch.randint(0, N, (128,), generator=g)
        opt.zero_grad()
        loss = crit(model(x, nbr)[batch], y[batch])
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.6)
    return fell, said


if __name__ == "__main__":
    sys.exit(main(globals()))
