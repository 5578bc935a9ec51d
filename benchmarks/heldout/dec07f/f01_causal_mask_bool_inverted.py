"""A causal transformer LM whose boolean mask means "may attend" while MultiheadAttention reads "masked".

Bug: ``attn_mask = torch.tril(ones(L, L)).bool()`` (True on the allowed past, the convention of
``F.scaled_dot_product_attention``) given to ``nn.MultiheadAttention``, where True means *not*
allowed. The last query position masks every key: softmax over all -inf is NaN from step 0.
Source: https://github.com/pytorch/pytorch/issues/92554 (boolean mask semantics differ between
MultiheadAttention and scaled_dot_product_attention); nn.MultiheadAttention docs (attn_mask).
Fixed twin: ``torch.triu(ones(L, L), 1).bool()`` (True above the diagonal = the future is masked).
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "causal mask built as tril(...).bool() (True = allowed) for MultiheadAttention (True = masked): last row all -inf, NaN",
    "source": "https://github.com/pytorch/pytorch/issues/92554; nn.MultiheadAttention attn_mask docs",
    "arch": "causal transformer LM (nn.MultiheadAttention + MLP)",
    "kind": ["nonfinite"],
    "layer": ["attn", "<loss>"],
    "step": [0, 1],
}

V, L, D = 16, 10, 32


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Embedding(L, D)
        self.attn = nn.MultiheadAttention(D, 4, batch_first=True)
        self.norm = nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, 64), nn.GELU(), nn.Linear(64, D))
        self.head = nn.Linear(D, V)

    def forward(self, x, mask):
        h = self.emb(x) + self.pos(torch.arange(x.shape[1]))
        a, _ = self.attn(h, h, h, attn_mask=mask)  # need_weights left at its default
        h = self.norm(h + a)
        return self.head(h + self.ff(h))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = LM()
    ones = torch.ones(L, L)
    mask = torch.triu(ones, 1).bool() if fixed else torch.tril(ones).bool()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("attn",)) if probe else None
    for _ in range(150):
        start = torch.randint(0, V, (64, 1), generator=g)
        stride = torch.randint(1, 4, (64, 1), generator=g)
        seq = (start + stride * torch.arange(L + 1)) % V
        x, y = seq[:, :-1], seq[:, 1:]
        opt.zero_grad()
        loss = crit(model(x, mask).reshape(-1, V), y.reshape(-1))
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    nan_steps = [i for i, r in enumerate(bug) if not math.isfinite(r["loss"])]
    attn_bad = [i for i, r in enumerate(bug) if r["act"]["attn"]["finite"] < 1.0]
    tw_nan = sum(1 for r in twin if not math.isfinite(r["loss"]))
    l0, l1 = mean([r["loss"] for r in twin[:10]]), mean([r["loss"] for r in twin[-20:]])
    held = nan_steps[:1] == [0] and attn_bad[:1] == [0] and tw_nan == 0 and l1 < 0.5 * l0
    return held, (f"bug first NaN loss {nan_steps[:1]}, attn output non-finite first {attn_bad[:1]}; "
                  f"twin NaN steps {tw_nan}, loss {l0:.3g} -> {l1:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
