"""A CBOW word-embedding model whose context sum goes through numpy: the embeddings never learn.

Bug: ``torch.tensor(self.ctx(c).detach().numpy().sum(1))`` (a numpy sum in forward) cuts the
graph: the context Embedding gets no gradient and stays at its random init while the output layer
trains alone.
Source: dalinvip/pytorch_word2vec issue #2 "np.sum breaks gradient transfering"
(https://github.com/dalinvip/pytorch_word2vec/issues/2): "u_embeddings never updates in CBOW model".
Fixed twin: ``self.ctx(c).sum(1)`` in torch.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, series  # noqa: E402

CASE = {
    "bug": "context embeddings summed through numpy in forward: no gradient reaches them",
    "source": "https://github.com/dalinvip/pytorch_word2vec/issues/2",
    "arch": "CBOW embeddings (nn.Embedding + linear decoder)",
    "kind": ["no_gradient", "frozen_weights"],
    "layer": ["ctx"],
    "step": [0, 2],
}


class CBOW(nn.Module):
    def __init__(self, fixed, vocab=500, d=32):
        super().__init__()
        self.fixed = fixed
        self.ctx = nn.Embedding(vocab, d)
        self.out = nn.Linear(d, vocab)

    def forward(self, c):
        if self.fixed:
            h = self.ctx(c).sum(1)
        else:
            h = torch.tensor(self.ctx(c).detach().numpy().sum(1))
        return self.out(h)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = CBOW(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    corpus = torch.randint(0, 500, (4000,), generator=g)
    corpus[1::2] = (corpus[0::2] * 7 + 3) % 500          # every odd word follows from the one before
    for _ in range(200):
        i = torch.randint(2, 3997, (64,), generator=g)
        c = torch.stack([corpus[i - 2], corpus[i - 1], corpus[i + 1], corpus[i + 2]], 1)
        opt.zero_grad()
        loss = crit(model(c), corpus[i])
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    gb = series(bug, "grad", "ctx")
    gt = series(twin, "grad", "ctx")
    w = bug[-1]["weight"]["ctx"] - bug[0]["weight"]["ctx"]
    held = all(v is None for v in gb) and all(v and v > 0 for v in gt) and w == 0.0
    return held, f"ctx grad None on {sum(v is None for v in gb)}/{len(gb)} bug steps, >0 on {sum(bool(v) for v in gt)}/{len(gt)} twin steps; bug ctx weight norm change {w:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
