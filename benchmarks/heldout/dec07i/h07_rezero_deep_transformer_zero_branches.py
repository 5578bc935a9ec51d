"""Healthy: a 12-block ReZero transformer encoder (no LayerNorm; each residual branch scaled by a
learned alpha initialised to 0).

What looks wrong: at step 0 every residual branch outputs exactly 0 (alpha = 0), so every
attention and feed-forward weight gets an exactly zero gradient on the first step and the
blocks are "silent"; only the alphas move first, then the branches wake up and the model
trains fast.
Source: Bachlechner et al. "ReZero is All You Need" (UAI 2021), sec. 3 and Algorithm 1;
https://github.com/majumderb/rezero.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, series  # noqa: E402

CASE = {"healthy": True, "what": "ReZero alpha = 0: every branch silent with zero gradient at step 0",
        "source": "Bachlechner et al. UAI 2021 (ReZero) sec. 3; https://github.com/majumderb/rezero",
        "arch": "12-block ReZero transformer encoder (d=32, 4 heads), sequence classification"}

V, L, D = 16, 12, 32


class ReZeroBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(D, 4, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(D, 64), nn.ReLU(), nn.Linear(64, D))
        self.alpha = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        x = x + self.alpha * self.attn(x, x, x, need_weights=False)[0]
        return x + self.alpha * self.ff(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(1, L, D) * 0.1)
        self.blocks = nn.Sequential(*[ReZeroBlock() for _ in range(12)])
        self.head = nn.Linear(D, 2)

    def forward(self, x):
        return self.head(self.blocks(self.emb(x) + self.pos).mean(1))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randint(0, V, (64, L), generator=g)
        y = ((x == 0).sum(1) + (x == 1).sum(1) >= 4).long()  # at least 4 of the 12 tokens in {0, 1}
        opt.zero_grad()
        out = model(x)
        loss = crit(out, y)
        loss.backward()
        if p:
            p.step(loss, acc=float((out.argmax(1) == y).float().mean()))
        opt.step()


def truth(bug, twin):
    g0 = series(bug, "grad", "blocks.5.ff.0")[0]
    g_late = mean(series(bug, "grad", "blocks.5.ff.0")[-20:])
    a0, a1 = mean([r["acc"] for r in bug[:10]]), mean([r["acc"] for r in bug[-20:]])
    ok = g0 == 0.0 and g_late > 0 and a1 > a0 + 0.2
    return ok, (f"blocks.5.ff.0 grad norm step 0 {g0} -> last-20 {g_late:.3g}; accuracy first-10 {a0:.3f} -> last-20 {a1:.3f}; "
                f"loss {bug[0]['loss']:.3g} -> {mean([r['loss'] for r in bug[-20:]]):.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
