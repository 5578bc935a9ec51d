"""A message-passing graph regressor whose global mean pool is called without the batch vector.

Bug: ``global_mean_pool(h)`` with ``batch=None`` (PyG's pool averages every node of the mini-batch
into ONE graph vector when ``batch`` is not given). The head then outputs one value for the whole
batch, which ``mse_loss`` broadcasts against the 32 targets: the model can only learn the targets'
mean, and its output no longer depends on which graph it sees.
Source: https://github.com/pyg-team/pytorch_geometric/issues/4809 (maintainer: "global_add_pool(x)
can lead to some serious bugs ... when simply forgetting to pass the batch"),
https://github.com/pyg-team/pytorch_geometric/issues/258; Humbatova et al. ICSE 2020 (wrong tensor
shape / API misuse).
Fixed twin: ``global_mean_pool(h, batch)``.
"""

import os
import sys
import warnings

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "global_mean_pool(h) without the batch vector: one pooled vector for all 32 graphs, MSE broadcast",
    "source": "https://github.com/pyg-team/pytorch_geometric/issues/4809; https://github.com/pyg-team/pytorch_geometric/issues/258",
    "arch": "message-passing GNN (2 layers, mean aggregation) + global mean pool + MLP head, graph regression",
    "kind": ["loss_plateau", "activation_collapse"],
    "layer": ["<loss>", "pool", "head", "head.*"],
    "step": [0, 150],
}


def global_mean_pool(x, batch=None, size=None):
    """PyG's semantics: without ``batch`` every node belongs to one graph."""
    if batch is None:
        return x.mean(dim=0, keepdim=True)
    size = int(batch.max()) + 1 if size is None else size
    sums = torch.zeros(size, x.size(1)).index_add_(0, batch, x)
    counts = torch.zeros(size).index_add_(0, batch, torch.ones(x.size(0))).clamp(min=1)
    return sums / counts[:, None]


class MP(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.self_lin = nn.Linear(i, o)
        self.nbr_lin = nn.Linear(i, o)

    def forward(self, x, edges):
        src, dst = edges
        agg = torch.zeros_like(x).index_add_(0, dst, x[src])
        deg = torch.zeros(x.size(0)).index_add_(0, dst, torch.ones(src.numel())).clamp(min=1)
        return torch.relu(self.self_lin(x) + self.nbr_lin(agg / deg[:, None]))


class Pool(nn.Module):
    def __init__(self, use_batch):
        super().__init__()
        self.use_batch = use_batch

    def forward(self, h, batch, size):
        return global_mean_pool(h, batch, size) if self.use_batch else global_mean_pool(h)


class GNN(nn.Module):
    def __init__(self, use_batch):
        super().__init__()
        self.mp1 = MP(4, 32)
        self.mp2 = MP(32, 32)
        self.pool = Pool(use_batch)
        self.head = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x, edges, batch, size):
        return self.head(self.pool(self.mp2(self.mp1(x, edges), edges), batch, size))


def make_batch(g, n_graphs=32):
    """Random graphs; the target is the graph's mean degree plus the mean of feature 0."""
    xs, es, bs, ys, off = [], [], [], [], 0
    for gi in range(n_graphs):
        n = int(torch.randint(5, 13, (1,), generator=g))
        p = float(torch.rand(1, generator=g)) * 0.6 + 0.1
        adj = (torch.rand(n, n, generator=g) < p).triu(1)
        src, dst = adj.nonzero(as_tuple=True)
        src, dst = torch.cat([src, dst]), torch.cat([dst, src])
        x = torch.randn(n, 4, generator=g)
        deg = torch.zeros(n).index_add_(0, dst, torch.ones(src.numel()))
        ys.append(deg.mean() / 3 + x[:, 0].mean())
        xs.append(x)
        es.append(torch.stack([src + off, dst + off]))
        bs.append(torch.full((n,), gi))
        off += n
    return torch.cat(xs), torch.cat(es, 1), torch.cat(bs), torch.stack(ys)[:, None]


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = GNN(use_batch=fixed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("pool", "head")) if probe else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mse_loss's broadcast warning: the bug is silent in logs
        for _ in range(200):
            x, e, b, y = make_batch(g)
            opt.zero_grad()
            out = model(x, e, b, 32)
            loss = crit(out, y)
            loss.backward()
            if p:
                p.step(loss, var=float(y.var()))
            opt.step()


def truth(bug, twin):
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    var = mean([r["var"] for r in bug[-30:]])
    held = lb > 0.7 * var and lt < 0.3 * var and lb > 3 * lt
    return held, f"last-30 loss bug {lb:.3g} twin {lt:.3g}; target variance {var:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
