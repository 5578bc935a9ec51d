"""A Siamese embedding network trained with only the positive half of the contrastive loss: it collapses.

Bug: the loss keeps ``y * d^2`` (pull similar pairs together) and drops
``(1 - y) * max(0, margin - d)^2`` (push dissimilar pairs apart), e.g. after a refactor that
filtered the batch to positive pairs. The trivial minimum maps every input to the same point:
the embeddings' spread across the batch goes to ~0 while the loss goes to 0.
Source: Hadsell, Chopra & LeCun CVPR 2006 sec. 2 and 3.1 (the contrastive term exists to prevent
the collapse to a constant mapping); XuyangBai/D3Feat issue #7 ("Still model seems to collapse to
one point?", https://github.com/XuyangBai/D3Feat/issues/7).
Fixed twin: the full contrastive loss with margin 2.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "contrastive loss without its negative term: every embedding collapses to one point",
    "source": "Hadsell, Chopra & LeCun CVPR 2006 sec. 3.1; https://github.com/XuyangBai/D3Feat/issues/7",
    "arch": "Siamese MLP encoder (shared weights) with a pairwise contrastive loss",
    "kind": ["activation_collapse", "vanishing_gradient", "dead_activation"],
    "layer": ["encoder", "encoder.*"],
    "step": [0, 150],
}


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 8))

    def forward(self, a, b):
        return self.encoder(a), self.encoder(b)


def make_loss(fixed):
    def contrastive(out, same):
        ea, eb = out
        d = (ea - eb).pow(2).sum(1).add(1e-9).sqrt()
        pos = same * d.pow(2)
        if not fixed:
            return pos.mean()
        return (pos + (1 - same) * torch.clamp(2.0 - d, min=0).pow(2)).mean()
    return contrastive


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randn(12, 16, generator=g) * 1.5
    model = Pair()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = make_loss(fixed)
    if writer:
        writer.watch(model, optimizer=opt)  # a function loss: recorded below
    p = probe(model, acts=("encoder",)) if probe else None
    for _ in range(200):
        i = torch.randint(0, 12, (64,), generator=g)
        same = (torch.rand(64, generator=g) < 0.5).float()
        j = torch.where(same > 0, i, (i + torch.randint(1, 12, (64,), generator=g)) % 12)
        a = ids[i] + 0.3 * torch.randn(64, 16, generator=g)
        b = ids[j] + 0.3 * torch.randn(64, 16, generator=g)
        opt.zero_grad()
        out = model(a, b)
        loss = crit(out, same)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss, spread=float(out[0].detach().std(0).mean()))
        opt.step()


def truth(bug, twin):
    sb = mean([r["spread"] for r in bug[-20:]]) / bug[0]["spread"]
    st = mean([r["spread"] for r in twin[-20:]]) / twin[0]["spread"]
    held = sb < 0.05 and st > 0.5
    return held, f"embedding spread across the batch, last-20 / step 0: bug {sb:.3g} twin {st:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
