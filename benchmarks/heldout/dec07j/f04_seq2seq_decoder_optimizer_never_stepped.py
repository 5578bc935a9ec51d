"""Seq2seq with one optimizer per half (as in the PyTorch tutorial) where ``decoder_optimizer.step()`` is missing.

Bug: the encoder's optimizer steps; the decoder's is zeroed but never stepped, so the decoder
(embedding, GRU, output layer) keeps its random initial weights for the whole run while its
gradients are computed every step. The model learns far less than the twin. Silent-ish: no NaN,
the loss falls a little through the encoder alone.
Source: PyTorch tutorial "NLP From Scratch: Translation with a Sequence to Sequence Network and
Attention" (two optimizers, encoder_optimizer and decoder_optimizer, both stepped,
https://pytorch.org/tutorials/intermediate/seq2seq_translation_tutorial.html); Humbatova et al.
ICSE 2020 taxonomy, "Training > Optimiser" faults.
Fixed twin: ``decoder_optimizer.step()`` after ``encoder_optimizer.step()``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "decoder_optimizer.step() never called: the seq2seq decoder keeps its initial weights",
    "source": "https://pytorch.org/tutorials/intermediate/seq2seq_translation_tutorial.html; Humbatova et al. ICSE 2020",
    "arch": "GRU encoder-decoder (sequence reversal), two optimizers",
    "kind": ["frozen_weights", "no_gradient", "loss_plateau"],
    "layer": ["decoder", "decoder.*", "<optimizer>"],
    "step": [0, 20],
}

V, T = 10, 6


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.ModuleDict({"emb": nn.Embedding(V, 24), "gru": nn.GRU(24, 48, batch_first=True)})
        self.decoder = nn.ModuleDict({"emb": nn.Embedding(V + 1, 24), "gru": nn.GRU(24, 48, batch_first=True),
                                      "out": nn.Linear(48, V)})

    def forward(self, src, tgt_in):
        _, h = self.encoder["gru"](self.encoder["emb"](src))
        o, _ = self.decoder["gru"](self.decoder["emb"](tgt_in), h)
        return self.decoder["out"](o)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Seq2Seq()
    enc_opt = torch.optim.Adam(model.encoder.parameters(), lr=5e-3)
    dec_opt = torch.optim.Adam(model.decoder.parameters(), lr=5e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=enc_opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        src = torch.randint(0, V, (64, T), generator=g)
        tgt = src.flip(1)
        tgt_in = torch.cat([torch.full((64, 1), V), tgt[:, :-1]], 1)  # BOS = V, teacher forcing
        enc_opt.zero_grad()
        dec_opt.zero_grad()
        loss = crit(model(src, tgt_in).reshape(-1, V), tgt.reshape(-1))
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        enc_opt.step()
        if fixed:
            dec_opt.step()


def truth(bug, twin):
    w = [r["weight"]["decoder.out"] for r in bug]
    moved = max(abs(v - w[0]) for v in w)
    lb = sum(r["loss"] for r in bug[-20:]) / 20
    lt = sum(r["loss"] for r in twin[-20:]) / 20
    held = moved == 0 and lb > 2 * lt
    return held, f"bug decoder.out weight norm moved by {moved:.3g}; loss last 20: bug {lb:.3g}, twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
