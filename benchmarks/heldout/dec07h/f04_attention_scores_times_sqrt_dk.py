"""A key-value lookup attention whose scores are multiplied by sqrt(d_k) instead of divided.

Bug: ``scores = q @ k.T * math.sqrt(d_k)`` (the reported form: ``scale = d_k ** -0.5`` then divided by): with d_k = 64 the
logits are 64x too large, the softmax is one-hot from the first step (on a random key), and the
saturated softmax passes the query/key projections a gradient that cannot move it off that key:
the lookup is never learnt (the twin solves it).
Source: Vaswani et al. 2017 sec. 3.2.1 (why the 1/sqrt(d_k) scaling: "pushing the softmax function
into regions where it has extremely small gradients"); https://github.com/esceptico/perceiver-io/issues/9
("self.scale should be multiplied instead of the divide").
Fixed twin: ``/ math.sqrt(d_k)``.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "attention scores multiplied by sqrt(d_k) instead of divided: softmax one-hot on a random key, lookup never learnt",
    "source": "https://github.com/esceptico/perceiver-io/issues/9; Vaswani et al. NeurIPS 2017 sec. 3.2.1",
    "arch": "single-head attention lookup over 16 key/value tokens (embeddings, q/k/v projections, linear head)",
    "kind": ["saturated_activation", "loss_plateau"],
    "layer": ["attn", "attn.*", "<loss>"],
    "step": [0, 150],
}

D = 64
V = 16


class Attn(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed
        self.q = nn.Linear(D, D)
        self.k = nn.Linear(D, D)
        self.v = nn.Linear(D, D)

    def forward(self, query, keys, values):
        s = self.q(query).unsqueeze(1) @ self.k(keys).transpose(1, 2)  # (B, 1, T)
        s = s / math.sqrt(D) if self.fixed else s * math.sqrt(D)
        self.probs = torch.softmax(s, -1)
        return (self.probs @ self.v(values)).squeeze(1)


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.val = nn.Embedding(V, D)
        self.attn = Attn(fixed)
        self.head = nn.Linear(D, V)

    def forward(self, qtok, ktok, vtok):
        return self.head(self.attn(self.emb(qtok), self.emb(ktok), self.val(vtok)))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        ktok = torch.stack([torch.randperm(V, generator=g) for _ in range(64)])  # 16 distinct keys
        vtok = torch.randint(0, V, (64, V), generator=g)
        pick = torch.randint(0, V, (64,), generator=g)
        qtok = ktok[torch.arange(64), pick]
        y = vtok[torch.arange(64), pick]  # the value stored under the queried key
        opt.zero_grad()
        loss = crit(model(qtok, ktok, vtok), y)
        loss.backward()
        if p:
            p.step(loss, maxp=float(model.attn.probs.detach().max(-1).values.mean()))
        opt.step()


def truth(bug, twin):
    mb = mean([r["maxp"] for r in bug[:10]])
    mt = mean([r["maxp"] for r in twin[:10]])
    lb, lt = mean([r["loss"] for r in bug[-20:]]), mean([r["loss"] for r in twin[-20:]])
    held = mb > 0.9 and mt < 0.5 and lb > 100 * lt
    return held, (f"mean max attention prob steps 0-9 bug {mb:.3f} twin {mt:.3f}; "
                  f"last-20 loss bug {lb:.3g} twin {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
