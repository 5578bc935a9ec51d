"""A GRU seq2seq whose decoder is never given the encoder's final state: it cannot see the input.

Bug: ``out, _ = self.decoder(emb)`` instead of ``self.decoder(emb, h_enc)``. The encoder runs but
nothing from it reaches the loss: its parameters get no gradient (``.grad`` stays None) and the
decoder, teacher-forced, can only learn the target language's statistics. On a sequence-reversal
task the loss stays near ln V for the first token and the twin solves it.
Source: https://github.com/bentrevett/pytorch-seq2seq/issues/3 ("If you don't pass an initial hidden
state to the decoder, it won't know anything about the sentence"); https://github.com/keras-team/keras/issues/2995
(without that connection "no gradients get passed" to the encoder); Humbatova et al. ICSE 2020.
Fixed twin: the decoder starts from the encoder's final hidden state.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "seq2seq decoder started from zeros instead of the encoder state: the encoder is cut off, no gradient reaches it",
    "source": "https://github.com/bentrevett/pytorch-seq2seq/issues/3; https://github.com/keras-team/keras/issues/2995",
    "arch": "GRU encoder-decoder (embeddings, 2 GRUs, linear head), teacher forcing, reversal task",
    "kind": ["no_gradient", "frozen_weights", "loss_plateau"],
    "layer": ["encoder", "src_emb", "<loss>"],
    "step": [0, 2],
}

V = 12
T = 7
BOS = 0


class Seq2Seq(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed
        self.src_emb = nn.Embedding(V, 32)
        self.tgt_emb = nn.Embedding(V, 32)
        self.encoder = nn.GRU(32, 64, batch_first=True)
        self.decoder = nn.GRU(32, 64, batch_first=True)
        self.head = nn.Linear(64, V)

    def forward(self, src, tgt_in):
        _, h = self.encoder(self.src_emb(src))
        emb = self.tgt_emb(tgt_in)
        out, _ = self.decoder(emb, h) if self.fixed else self.decoder(emb)
        return self.head(out)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Seq2Seq(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        src = torch.randint(1, V, (64, T), generator=g)
        tgt = src.flip(1)
        tgt_in = torch.cat([torch.full((64, 1), BOS), tgt[:, :-1]], 1)
        opt.zero_grad()
        loss = crit(model(src, tgt_in).reshape(-1, V), tgt.reshape(-1))
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    none = all(r["grad"]["encoder"] is None for r in bug)
    lb, lt = mean([r["loss"] for r in bug[-20:]]), mean([r["loss"] for r in twin[-20:]])
    held = none and lb > 2.0 and lt < 0.5 * lb
    return held, f"bug encoder .grad None at every step: {none}; last-20 loss bug {lb:.3g} (ln 11 = 2.40) twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
