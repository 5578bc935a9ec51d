"""A batch-first transformer classifier whose positional encoding is sliced along the batch axis.

Bug: the PositionalEncoding of the PyTorch transformer tutorial keeps ``pe`` as ``(max_len, 1, d)``
and adds ``pe[:x.size(0)]``, which assumes ``(seq, batch, d)``. Fed ``(batch, seq, d)`` it adds
row b of the table to every token of sample b: no token learns its position, the encoder is
permutation invariant, and the label (the FIRST token of the sequence) can only be guessed from
the bag of tokens. The loss stays far above the twin's; nothing raises because the shapes broadcast.
Source: https://github.com/tanjimin/C.Origami/issues/42 ("x = x + self.pe[:x.size(0)] will return
the wrong location information"); https://github.com/pytorch/tutorials/issues/1547;
https://github.com/KasperGroesLudvigsen/influenza_transformer/issues/9.
Fixed twin: ``pe`` kept as ``(1, max_len, d)`` and ``x + pe[:, :x.size(1)]``.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "sinusoidal positional encoding indexed by the batch axis of batch-first input",
    "source": "https://github.com/tanjimin/C.Origami/issues/42",
    "arch": "token embedding + positional encoding + 1-layer TransformerEncoder (batch_first) + mean pool",
    "kind": ["loss_plateau"],
    "layer": ["<loss>", "<input>", "pos", "encoder*", "emb"],
    "step": [0, 150],
}

V, T, D = 8, 10, 32


class PositionalEncoding(nn.Module):
    def __init__(self, d, batch_first_fix, max_len=64):
        super().__init__()
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        pe = torch.zeros(max_len, 1, d)
        pe[:, 0, 0::2] = torch.sin(pos * div)
        pe[:, 0, 1::2] = torch.cos(pos * div)
        self.fix = batch_first_fix
        self.register_buffer("pe", pe.transpose(0, 1) if batch_first_fix else pe)

    def forward(self, x):
        if self.fix:
            return x + self.pe[:, : x.size(1)]
        return x + self.pe[: x.size(0)]  # the tutorial's line, fed (batch, seq, d)


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = PositionalEncoding(D, fixed)
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(D, 4, 64, dropout=0.0, batch_first=True), 1)
        self.head = nn.Linear(D, V)

    def forward(self, tok):
        h = self.encoder(self.pos(self.emb(tok)))
        return self.head(h.mean(1))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        tok = torch.randint(0, V, (64, T), generator=g)
        y = tok[:, 0]
        opt.zero_grad()
        loss = crit(model(tok), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = lb > 1.0 and lb > 2 * lt
    return held, f"last-30 loss bug {lb:.3g} twin {lt:.3g} (ln 8 = 2.08)"


if __name__ == "__main__":
    sys.exit(main(globals()))
