"""Healthy: a GRU language model whose output layer shares its weight with the input embedding.

Fools: one Parameter belongs to two modules (``decoder.weight is embed.weight``), so its gradient
is the sum of two paths and the same weight norm/update shows up under both names; the embedding
also gets integer token input.
Source of the recipe: weight tying (Press & Wolf, EACL 2017; Inan et al., ICLR 2017), as in the
PyTorch word_language_model example's ``--tied`` option
(https://github.com/pytorch/examples/blob/main/word_language_model/model.py).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "a weight shared by the embedding and the output layer (tied)",
        "source": "https://github.com/pytorch/examples/blob/main/word_language_model/model.py (--tied)",
        "arch": "GRU LM with tied embedding/decoder"}


class LM(nn.Module):
    def __init__(self, vocab=30, d=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.gru = nn.GRU(d, d, batch_first=True)
        self.decoder = nn.Linear(d, vocab)
        self.decoder.weight = self.embed.weight

    def forward(self, t):
        h, _ = self.gru(self.embed(t))
        return self.decoder(h)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = LM()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        start = torch.randint(0, 30, (32, 1), generator=g)
        step = torch.randint(1, 3, (32, 1), generator=g)
        seq = (start + step * torch.arange(21)) % 30
        opt.zero_grad()
        loss = crit(model(seq[:, :-1]).reshape(-1, 30), seq[:, 1:].reshape(-1))
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.3)


if __name__ == "__main__":
    sys.exit(main(globals()))
