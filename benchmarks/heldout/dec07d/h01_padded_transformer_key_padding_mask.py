"""Healthy: a transformer classifier on heavily padded variable-length sequences, masked correctly.

Fools: most positions are padding (lengths 3..40 padded to 40): the padding embedding row has
exactly zero gradient (padding_idx), masked keys get -inf attention logits, the padded positions'
outputs are thrown away by a masked mean, so large parts of every activation carry no signal.
Source of the recipe: nn.TransformerEncoder with src_key_padding_mask (True = padding), PyTorch
docs https://pytorch.org/docs/stable/generated/torch.nn.TransformerEncoder.html; masked mean
pooling as in sentence-transformers' mean pooling.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "most positions padded: zero-gradient padding row, -inf attention on pads",
        "source": "PyTorch TransformerEncoder src_key_padding_mask docs",
        "arch": "TransformerEncoder classifier (3 classes)"}

V, T, D = 30, 40, 32


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D, padding_idx=0)
        self.pos = nn.Embedding(T, D)
        layer = nn.TransformerEncoderLayer(D, 4, 64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(D, 3)

    def forward(self, tok):
        pad = tok == 0
        h = self.emb(tok) + self.pos(torch.arange(tok.size(1)))
        h = self.encoder(h, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).float()
        return self.head((h * keep).sum(1) / keep.sum(1))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        lengths = torch.randint(3, T + 1, (48,), generator=g)
        tok = torch.randint(1, V, (48, T), generator=g)
        tok[torch.arange(T)[None, :] >= lengths[:, None]] = 0
        y = ((tok == 5).sum(1) > 0).long() + ((tok == 6).sum(1) > 0).long()  # 0, 1 or 2 marker kinds
        opt.zero_grad()
        loss = crit(model(tok), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.5)


if __name__ == "__main__":
    sys.exit(main(globals()))
