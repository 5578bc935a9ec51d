"""A GRU encoder-decoder with dot-product attention whose softmax runs over the batch dimension.

Bug: ``F.softmax(scores, dim=0)`` on scores shaped (batch, source_len): each source position's
weights are normalised across the 64 sequences of the batch, so a sequence's context is a mix of
other sequences' encoder states with weights that do not sum to 1 over its own positions. The
decoder learns far less of the task (reversing a sequence) than with attention over positions.
Source: https://github.com/keon/seq2seq/pull/6 (review: "this softmax ... computes softmax along
the batch dimension"), https://github.com/PetrochukM/PyTorch-NLP/issues/2 ("Attention's softmax
dimension is wrong"), https://github.com/jadore801120/attention-is-all-you-need-pytorch/issues/52.
Fixed twin: ``F.softmax(scores, dim=1)``.
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "seq2seq attention softmax over the batch dim (dim=0) instead of source positions",
    "source": "https://github.com/keon/seq2seq/pull/6; https://github.com/PetrochukM/PyTorch-NLP/issues/2",
    "arch": "bidirectional GRU encoder, GRU decoder with dot attention, teacher forcing, sequence reversal (vocab 12, length 12)",
    "kind": ["loss_plateau", "activation_collapse"],
    "layer": ["<loss>", "attn", "decoder", "out"],
    "step": [0, 150],
}

V, L, H, B = 12, 12, 64, 64
BOS = V  # extra decoder input token


class Attn(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, q, enc):  # q (B, H), enc (B, L, H)
        scores = torch.einsum("bh,blh->bl", q, enc) / H ** 0.5
        w = F.softmax(scores, dim=self.dim)
        return torch.einsum("bl,blh->bh", w, enc)


class Seq2Seq(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.src_emb = nn.Embedding(V, 32)
        self.tgt_emb = nn.Embedding(V + 1, 32)
        self.encoder = nn.GRU(32, H // 2, batch_first=True, bidirectional=True)
        self.decoder = nn.GRUCell(32 + H, H)
        self.attn = Attn(1 if fixed else 0)
        self.out = nn.Linear(2 * H, V)

    def forward(self, src, tgt_in):
        enc, h = self.encoder(self.src_emb(src))
        h = torch.cat([h[0], h[1]], 1)
        ctx = self.attn(h, enc)
        logits = []
        for t in range(tgt_in.size(1)):
            h = self.decoder(torch.cat([self.tgt_emb(tgt_in[:, t]), ctx], 1), h)
            ctx = self.attn(h, enc)
            logits.append(self.out(torch.cat([h, ctx], 1)))
        return torch.stack(logits, 1)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Seq2Seq(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        src = torch.randint(0, V, (B, L), generator=g)
        tgt = src.flip(1)
        tgt_in = torch.cat([torch.full((B, 1), BOS), tgt[:, :-1]], 1)
        logits = model(src, tgt_in)
        loss = crit(logits.reshape(-1, V), tgt.reshape(-1))
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss, acc=float((logits.argmax(-1) == tgt).float().mean()))
        opt.step()


def truth(bug, twin):
    ab, at = mean([r["acc"] for r in bug[-20:]]), mean([r["acc"] for r in twin[-20:]])
    lb, lt = mean([r["loss"] for r in bug[-20:]]), mean([r["loss"] for r in twin[-20:]])
    held = at > 0.8 and ab < at - 0.2 and lb > 2 * lt
    return held, f"token accuracy last-20 bug {ab:.3f} twin {at:.3f}; loss bug {lb:.3g} twin {lt:.3g} (ln 12 = 2.48)"


if __name__ == "__main__":
    sys.exit(main(globals()))
