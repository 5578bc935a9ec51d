"""A two-hop GCN with a hand-written sparse-matmul autograd Function that checks the wrong input.

Bug: ``SpMM.backward`` guards the feature gradient with ``ctx.needs_input_grad[0]`` (the
adjacency, which never requires grad) instead of ``[1]`` (the features): it returns None for the
features, so nothing below the propagation learns. ``lin1`` keeps its random initial weights
(exactly zero gradient every step) and only the head trains, on random features.
Source: PyTorch docs, "Extending torch.autograd" (needs_input_grad is indexed like forward's
inputs, https://pytorch.org/docs/stable/notes/extending.html); custom-Function backward bugs are
a class of Humbatova et al., "Taxonomy of Real Faults in Deep Learning Systems", ICSE 2020.
Fixed twin: ``ctx.needs_input_grad[1]``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "custom autograd SpMM backward checks needs_input_grad[0] (adjacency) for the features' grad",
    "source": "https://pytorch.org/docs/stable/notes/extending.html (needs_input_grad); Humbatova et al. ICSE 2020",
    "arch": "2-layer GCN over a planted-partition graph (node classification, 3 classes)",
    "kind": ["no_gradient", "frozen_weights"],
    "layer": ["lin1"],
    "step": [0, 5],
}

N, F = 300, 16


def make_spmm(fixed):
    class SpMM(torch.autograd.Function):
        @staticmethod
        def forward(ctx, adj, x):
            ctx.save_for_backward(adj)
            return adj @ x

        @staticmethod
        def backward(ctx, grad):
            (adj,) = ctx.saved_tensors
            want = ctx.needs_input_grad[1] if fixed else ctx.needs_input_grad[0]
            return None, (adj.t() @ grad if want else None)

    return SpMM.apply


class GCN(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.spmm = make_spmm(fixed)
        self.lin1 = nn.Linear(F, 32)
        self.lin2 = nn.Linear(32, 32)
        self.head = nn.Linear(32, 3)

    def forward(self, adj, x):
        h = torch.relu(self.spmm(adj, self.lin1(x)))
        h = torch.relu(self.lin2(self.spmm(adj, h)))
        return self.head(h)


def graph(g):
    comm = torch.arange(N) % 3
    same = comm[:, None] == comm[None, :]
    prob = torch.where(same, torch.tensor(0.06), torch.tensor(0.005))
    a = (torch.rand(N, N, generator=g) < prob).float()
    a = torch.triu(a, 1)
    a = a + a.t() + torch.eye(N)
    d = a.sum(1).rsqrt()
    adj = d[:, None] * a * d[None, :]
    x = torch.randn(N, F, generator=g)
    x[:, :3] += 0.6 * nn.functional.one_hot(comm, 3).float()
    return adj, x, comm


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    adj, x, y = graph(g)
    model = GCN(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        opt.zero_grad()
        loss = crit(model(adj, x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    gb = [r["grad"].get("lin1") for r in bug]
    gt = mean([r["grad"].get("lin1") for r in twin])
    gh = mean([r["grad"].get("head") for r in bug])
    held = all(v in (None, 0.0) for v in gb) and gt > 1e-4 and gh > 1e-4
    return held, f"lin1 grad bug {set(gb)} twin mean {gt:.3g}; bug head grad {gh:.3g} (head still trains)"


if __name__ == "__main__":
    sys.exit(main(globals()))
