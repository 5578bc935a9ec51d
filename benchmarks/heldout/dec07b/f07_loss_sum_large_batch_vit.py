"""A small patch-embedding transformer (ViT-like) trained with CrossEntropyLoss(reduction='sum').

Bug: the loss is summed over a batch of 256 while the SGD rate was chosen for a mean: the
effective rate is 256x larger and the first steps blow the model up.
Source: jax-ml/jax PR #3113 ("Loss was calculated using np.sum without accounting for the number
of samples ... lead to exploding gradients for larger batches", https://github.com/jax-ml/jax/pull/3113);
ai-safety-foundation/sparse_autoencoder issue #63 (sum vs mean, lr depends on batch size).
Fixed twin: reduction='mean'.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "CrossEntropyLoss(reduction='sum') over a batch of 256 with a rate set for the mean",
    "source": "https://github.com/jax-ml/jax/pull/3113; https://github.com/ai-safety-foundation/sparse_autoencoder/issues/63",
    "arch": "ViT-like: Conv2d patch embedding + TransformerEncoderLayer + linear head",
    "kind": ["exploding_gradient", "loss_spike", "nonfinite", "activation_explosion"],
    "layer": ["<optimizer>", "<loss>"],
    "step": [0, 5],
}


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(1, 32, 4, stride=4)
        self.pos = nn.Parameter(torch.zeros(1, 16, 32))
        self.block = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        return self.head(self.block(t).mean(1))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = ViT()
    proto = torch.randn(4, 1, 16, 16, generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    crit = nn.CrossEntropyLoss(reduction="mean" if fixed else "sum")
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("head",)) if probe else None
    for _ in range(150):
        y = torch.randint(0, 4, (256,), generator=g)
        x = proto[y] + 1.0 * torch.randn(256, 1, 16, 16, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    gb = bug[0]["grad"]["head"] / twin[0]["grad"]["head"]
    pb = [r["loss"] / 256 for r in bug]
    peak = max((v for v in pb[:6] if v == v), default=float("nan"))
    lb = mean(pb[-20:])
    lt = mean([r["loss"] for r in twin[-20:]])
    held = gb > 100 and (peak > 3 * pb[0] or any(v != v for v in pb[:6])) and (lb != lb or lb > 3 * lt)
    return held, (f"step 0 head grad bug/twin {gb:.3g}; bug per-sample loss max steps 0-5 {peak:.3g} vs step 0 {pb[0]:.3g}; "
                  f"last-20 per-sample loss bug {lb:.3g} twin {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
