"""A transformer classifier whose batches sometimes hold an empty (all-padding) sequence: NaN.

Bug: documents of length 0 are kept; ``key_padding_mask`` masks every key of such a row, the
attention softmax over an all -inf row is NaN, and the NaN reaches the loss and every gradient.
Source: pytorch/pytorch issue #41508 "nn.MultiheadAttention causes gradients to become NaN under
some use cases" (https://github.com/pytorch/pytorch/issues/41508) and PR #42323.
Fixed twin: empty documents are dropped before batching (length >= 1).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, series  # noqa: E402

CASE = {
    "bug": "key_padding_mask of an empty sequence masks every key: softmax of all -inf is NaN",
    "source": "https://github.com/pytorch/pytorch/issues/41508",
    "arch": "transformer (nn.MultiheadAttention)",
    "kind": ["nonfinite"],
    "layer": ["attn"],
    "step": [40, 41],
}


class Classifier(nn.Module):
    def __init__(self, vocab=50, d=32, k=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, d, padding_idx=0)
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, k)

    def forward(self, tokens, pad):
        x = self.emb(tokens)
        a, _ = self.attn(x, x, x, key_padding_mask=pad)
        h = self.norm(x + a)
        keep = (~pad).unsqueeze(-1).float()
        pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.head(pooled)


def batch(g, step, fixed, n=16, length=12):
    lengths = torch.randint(1, length + 1, (n,), generator=g)
    if step >= 40 and step % 7 == 5 and not fixed:
        lengths[3] = 0                      # an empty document reaches the batch
    tokens = torch.randint(1, 50, (n, length), generator=g)
    pad = torch.arange(length).unsqueeze(0) >= lengths.unsqueeze(1)
    tokens = tokens.masked_fill(pad, 0)
    y = (tokens[:, 0] % 4)
    return tokens, pad, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Classifier()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("attn",)) if probe else None
    for step in range(150):
        tokens, pad, y = batch(g, step, fixed)
        opt.zero_grad()
        loss = crit(model(tokens, pad), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    bad = [i for i, r in enumerate(bug) if r["loss"] != r["loss"]]
    fin = series(bug, "act", "attn", "finite")
    first_attn = next((i for i, f in enumerate(fin) if f is not None and f < 1), None)
    twin_bad = [i for i, r in enumerate(twin) if r["loss"] != r["loss"]]
    held = bool(bad) and bad[0] == 40 and first_attn == 40 and not twin_bad
    return held, f"bug: first NaN loss at {bad[:1]}, attn output non-finite first at {first_attn}; twin NaN steps {len(twin_bad)}"


if __name__ == "__main__":
    sys.exit(main(globals()))
