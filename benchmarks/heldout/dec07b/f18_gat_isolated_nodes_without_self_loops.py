"""A hand-written graph attention network masking non-edges with -inf, without self-loops, on a graph
with isolated nodes.

Bug: attention scores of non-neighbours are set to ``-inf`` before the softmax; the self-loops
(GAT's j in N(i) U {i}) were left out, so an isolated node's row is all ``-inf`` and its softmax is
0/0 = NaN from the first forward; the NaN reaches the loss and every parameter.
Source: PetarV-/GAT issue #39 (non-edges set to "negative infinity" before the softmax,
https://github.com/PetarV-/GAT/issues/39); pyg-team/pytorch_geometric issue #1836 (self-loops
in GATConv and ``add_self_loops``, https://github.com/pyg-team/pytorch_geometric/issues/1836);
Velickovic et al. ICLR 2018 eq. 3 (softmax over N(i), which includes i).
Fixed twin: self-loops added to the adjacency.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "GAT without self-loops masks an isolated node's whole row with -inf: softmax NaN at step 0",
    "source": "https://github.com/PetarV-/GAT/issues/39; https://github.com/pyg-team/pytorch_geometric/issues/1836",
    "arch": "graph attention network written by hand (2 layers, dense adjacency)",
    "kind": ["nonfinite"],
    "layer": ["gat1", "gat1.*"],
    "step": [0, 0],
}


class GATLayer(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.lin = nn.Linear(i, o, bias=False)
        self.a_src, self.a_dst = nn.Linear(o, 1, bias=False), nn.Linear(o, 1, bias=False)

    def forward(self, x, adj):
        h = self.lin(x)
        e = nn.functional.leaky_relu(self.a_dst(h) + self.a_src(h).T, 0.2)
        e = e.masked_fill(adj == 0, float("-inf"))
        return torch.softmax(e, -1) @ h


class GAT(nn.Module):
    def __init__(self):
        super().__init__()
        self.gat1, self.gat2 = GATLayer(8, 16), GATLayer(16, 3)

    def forward(self, x, adj):
        return self.gat2(torch.relu(self.gat1(x, adj)), adj)


def graph(g, n=120):
    y = torch.randint(0, 3, (n,), generator=g)
    same = (y.unsqueeze(0) == y.unsqueeze(1)).float()
    a = (torch.rand(n, n, generator=g) < 0.08 * same + 0.01).float().triu(1)
    a = a + a.T
    a[:6] = 0  # six isolated nodes (e.g. users with no interactions)
    a[:, :6] = 0
    x = torch.randn(n, 8, generator=g) + nn.functional.one_hot(y, 8).float() * 2
    return a, x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    a, x, y = graph(g)
    if fixed:
        a = a + torch.eye(len(a))
    model = GAT()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("gat1", "gat1.lin")) if probe else None
    for _ in range(150):
        opt.zero_grad()
        loss = crit(model(x, a), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lin_ok = bug[0]["act"]["gat1.lin"]["finite"] == 1.0
    out_bad = bug[0]["act"]["gat1"]["finite"] < 1.0
    first = next((i for i, r in enumerate(bug) if r["loss"] != r["loss"]), None)
    twin_ok = all(r["loss"] == r["loss"] for r in twin) and twin[-1]["loss"] < 0.5 * twin[0]["loss"]
    held = lin_ok and out_bad and first == 0 and twin_ok
    return held, (f"step 0: gat1.lin finite {lin_ok}, gat1 output finite fraction {bug[0]['act']['gat1']['finite']:.3f}; "
                  f"bug loss first NaN at {first}; twin finite and trains: {twin_ok}")


if __name__ == "__main__":
    sys.exit(main(globals()))
