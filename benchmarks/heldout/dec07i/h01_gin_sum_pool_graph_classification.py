"""Healthy: a GIN (sum aggregation, sum readout) graph classifier with BatchNorm.

What looks wrong: sum aggregation and sum pooling make activations scale with node degree and
graph size (graph embeddings in the tens to hundreds, varying x10 between graphs); BatchNorm inside
each GIN MLP keeps training stable. This is GIN as published (sum is what makes it as powerful as
the WL test).
Source: Xu et al. ICLR 2019 "How Powerful are Graph Neural Networks?" eq. 4.1 and sec. 4.2;
https://github.com/weihua916/powerful-gnns (GIN-0 with sum readout).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {"healthy": True, "what": "GIN sum aggregation + sum readout: activations scale with degree and graph size",
        "source": "Xu et al. ICLR 2019 eq. 4.1; https://github.com/weihua916/powerful-gnns",
        "arch": "GIN (3 layers, MLP with BatchNorm), sum readout, 3-class graph classification"}


class GINLayer(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(i, o), nn.BatchNorm1d(o), nn.ReLU(), nn.Linear(o, o), nn.ReLU())

    def forward(self, x, src, dst):
        return self.mlp(x + torch.zeros_like(x).index_add_(0, dst, x[src]))


class GIN(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([GINLayer(3, 32), GINLayer(32, 32), GINLayer(32, 32)])
        self.head = nn.Linear(32, 3)

    def forward(self, x, src, dst, batch, n_graphs):
        for layer in self.layers:
            x = layer(x, src, dst)
        pooled = torch.zeros(n_graphs, x.size(1)).index_add_(0, batch, x)
        return self.head(pooled)


def make_batch(g, n=32):
    """Class 0: rings, 1: stars, 2: dense random graphs, 6-30 nodes; node features are noise."""
    xs, ss, ds, bs, ys, off = [], [], [], [], [], 0
    for gi in range(n):
        k = int(torch.randint(0, 3, (1,), generator=g))
        m = int(torch.randint(6, 31, (1,), generator=g))
        if k == 0:
            src = torch.arange(m)
            dst = (src + 1) % m
        elif k == 1:
            src = torch.zeros(m - 1, dtype=torch.long)
            dst = torch.arange(1, m)
        else:
            adj = (torch.rand(m, m, generator=g) < 0.3).triu(1)
            src, dst = adj.nonzero(as_tuple=True)
        src, dst = torch.cat([src, dst]), torch.cat([dst, src])
        xs.append(torch.randn(m, 3, generator=g))
        ss.append(src + off)
        ds.append(dst + off)
        bs.append(torch.full((m,), gi))
        ys.append(k)
        off += m
    return torch.cat(xs), torch.cat(ss), torch.cat(ds), torch.cat(bs), torch.tensor(ys)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = GIN()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        x, s, d, b, y = make_batch(g)
        opt.zero_grad()
        out = model(x, s, d, b, 32)
        loss = crit(out, y)
        loss.backward()
        if p:
            p.step(loss, acc=float((out.argmax(1) == y).float().mean()))
        opt.step()


def truth(bug, twin):
    ok, msg = loss_fell(bug, 0.3)
    acc = mean([r["acc"] for r in bug[-20:]])
    return ok and acc > 0.9, f"{msg}; last-20 accuracy {acc:.3f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
