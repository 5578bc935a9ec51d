"""Embeddings L2-normalised by hand, ``x / x.norm(dim=1, keepdim=True)``, on rows that can be exactly zero.

Bug: the encoder ends in a ReLU, and after some steps some samples' embeddings are all zeros; the
hand-written normalisation divides 0 by 0, the cosine logits turn NaN, the loss turns NaN and so
do the weights after the next step. ``F.normalize`` has an ``eps`` for exactly this reason.
Source: PyTorch docs of ``torch.nn.functional.normalize`` (``v / max(||v||, eps)``,
https://pytorch.org/docs/stable/generated/torch.nn.functional.normalize.html); the forum class
"NaN after normalizing a zero vector" (discuss.pytorch.org).
Fixed twin: ``F.normalize(x, dim=1)``.
"""

import math
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "hand-written L2 normalisation of ReLU embeddings divides 0 by 0 on all-zero rows: NaN",
    "source": "https://pytorch.org/docs/stable/generated/torch.nn.functional.normalize.html",
    "arch": "cosine-softmax classifier over ReLU embeddings (metric learning)",
    "kind": ["nonfinite"],
    "layer": ["enc.2", "enc.*", "<loss>", "proto"],
    "step": [0, 40],
}


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed
        self.enc = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 8), nn.ReLU())
        self.proto = nn.Linear(8, 5, bias=False)

    def forward(self, x):
        z = self.enc(x)
        z = F.normalize(z, dim=1) if self.fixed else z / z.norm(dim=1, keepdim=True)
        return 10 * F.linear(z, F.normalize(self.proto.weight, dim=1))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(3)
    g = torch.Generator().manual_seed(1)
    centers = torch.randn(5, 10, generator=g)
    model = Net(fixed)
    with torch.no_grad():
        model.enc[2].bias.fill_(-0.3)  # a few embeddings start all-zero; more as training goes
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("enc.3",)) if probe else None
    for _ in range(150):
        y = torch.randint(0, 5, (64,), generator=g)
        x = centers[y] + 0.7 * torch.randn(64, 10, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    first = next((i for i, r in enumerate(bug) if not math.isfinite(r["loss"])), None)
    twin_ok = all(math.isfinite(r["loss"]) for r in twin)
    fell = sum(r["loss"] for r in twin[-10:]) < 0.5 * sum(r["loss"] for r in twin[:10])
    held = first is not None and first <= 40 and twin_ok and fell
    return held, f"bug loss first NaN at step {first}; twin finite {twin_ok}, twin fell 2x {fell}"


if __name__ == "__main__":
    sys.exit(main(globals()))
