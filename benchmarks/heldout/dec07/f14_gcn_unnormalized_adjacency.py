"""A hand-written 3-layer GCN fed the raw adjacency matrix (no self-loops, no D^-1/2 A D^-1/2).

Bug: ``A @ X @ W`` with the raw 0/1 adjacency of a graph of mean degree ~40: each layer multiplies
the feature scale by the degree, activations reach ~1e4 at the third layer, and SGD diverges.
Source: danielegrattarola/spektral issue #21 "adjacency matrix normalization"
(https://github.com/danielegrattarola/spektral/issues/21) and issue #295 "Adjacency matrix
normalization before GCNConv layer" (https://github.com/danielegrattarola/spektral/issues/295);
Kipf & Welling, ICLR 2017, eq. 2 (renormalisation trick).
Fixed twin: Â = D^-1/2 (A + I) D^-1/2.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, ratio  # noqa: E402

CASE = {
    "bug": "GCN on the raw adjacency (degree ~40): feature scale x40 per layer",
    "source": "https://github.com/danielegrattarola/spektral/issues/21; Kipf & Welling ICLR 2017 eq. 2",
    "arch": "graph convolution network written by hand (3 layers)",
    "kind": ["activation_explosion", "exploding_gradient", "nonfinite"],
    "layer": ["gc1", "gc2"],
    "step": [0, 3],
}


class GraphConv(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.lin = nn.Linear(i, o)

    def forward(self, x, adj):
        return adj @ self.lin(x)


class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.gc1, self.gc2, self.gc3 = GraphConv(16, 32), GraphConv(32, 32), GraphConv(32, 3)

    def forward(self, x, adj):
        x = torch.relu(self.gc1(x, adj))
        x = torch.relu(self.gc2(x, adj))
        return self.gc3(x, adj)


def graph(g, n=200):
    labels = torch.randint(0, 3, (n,), generator=g)
    same = (labels.unsqueeze(0) == labels.unsqueeze(1)).float()
    prob = 0.3 * same + 0.05 * (1 - same)
    a = (torch.rand(n, n, generator=g) < prob).float().triu(1)
    a = a + a.T
    x = torch.randn(n, 16, generator=g) + nn.functional.one_hot(labels, 16).float()
    return a, x, labels


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    a, x, y = graph(g)
    if fixed:
        a = a + torch.eye(len(a))
        d = a.sum(1).rsqrt()
        a = d.unsqueeze(1) * a * d.unsqueeze(0)
    model = GCN()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("gc1", "gc2", "gc3")) if probe else None
    for _ in range(150):
        opt.zero_grad()
        loss = crit(model(x, a), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    m1 = ratio(bug[0]["act"]["gc1"]["maxabs"], twin[0]["act"]["gc1"]["maxabs"])
    m3 = ratio(bug[0]["act"]["gc3"]["maxabs"], twin[0]["act"]["gc3"]["maxabs"])
    gl = ratio(bug[0]["grad"]["gc1.lin"], twin[0]["grad"]["gc1.lin"])
    tb = mean([r["loss"] for r in twin[-20:]])
    bb = mean([r["loss"] for r in bug[-20:]])
    held = m1 > 10 and m3 > 1000 and gl > 1000 and (bb != bb or bb > 3 * tb)
    return held, f"step 0 max|act| bug/twin gc1 {m1:.3g} gc3 {m3:.3g}; gc1.lin grad bug/twin {gl:.3g}; last-20 loss bug {bb:.3g} twin {tb:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
