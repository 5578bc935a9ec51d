"""A segmentation net whose (N, C, H, W) logits are flattened with .view(-1, C) without moving C last.

Bug: to compute a per-pixel loss the logits are reshaped ``out.reshape(-1, C)`` straight from
(N, C, H, W). Each "pixel row" then holds C neighbouring values of ONE channel, not the C class scores
of one pixel, so the scores and the labels (``mask.view(-1)``) are paired wrongly. Nothing crashes;
a fully convolutional net cannot undo the scramble, and the loss stays near chance.
Source: https://github.com/qubvel-org/segmentation_models.pytorch/pull/461 (the Lovasz loss flattened
probabilities without ``permute(0, 2, 3, 1)``/``movedim``; fixed the same way in pytorch-toolbelt
https://github.com/BloodAxe/pytorch-toolbelt/pull/62); https://github.com/wkentaro/pytorch-fcn/issues/7.
Fixed twin: ``out.permute(0, 2, 3, 1).reshape(-1, C)``.
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "segmentation logits (N,C,H,W) flattened with reshape(-1, C) without permute: scores paired with wrong labels",
    "source": "https://github.com/qubvel-org/segmentation_models.pytorch/pull/461",
    "arch": "fully convolutional segmenter (3 classes, 16x16 images)",
    "kind": ["loss_plateau"],
    "layer": ["<loss>"],
    "step": [0, 60],
}

C = 3


class FCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.act2 = nn.ReLU()
        self.cls = nn.Conv2d(16, C, 1)

    def forward(self, x):
        return self.cls(self.act2(self.conv2(self.act1(self.conv1(x)))))


def batch(g, n=16):
    # class 1: bright squares, class 2: dark squares, class 0: background
    x = 0.2 * torch.randn(n, 1, 16, 16, generator=g)
    mask = torch.zeros(n, 16, 16, dtype=torch.long)
    for i in range(n):
        for k in (1, 2):
            r, c = (int(v) for v in torch.randint(0, 11, (2,), generator=g))
            x[i, 0, r:r + 5, c:c + 5] = 1.0 if k == 1 else -1.0
            mask[i, r:r + 5, c:c + 5] = k
    return x, mask


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = FCN()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(150):
        x, mask = batch(g)
        opt.zero_grad()
        out = model(x)
        flat = out.permute(0, 2, 3, 1).reshape(-1, C) if fixed else out.reshape(-1, C)
        loss = F.cross_entropy(flat, mask.view(-1))
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            acc = float((out.argmax(1) == mask).float().mean())
            p.step(loss, acc=acc)
        opt.step()


def truth(bug, twin):
    lb = mean([r["loss"] for r in bug[-20:]])
    lt = mean([r["loss"] for r in twin[-20:]])
    ab = mean([r["acc"] for r in bug[-20:]])
    at = mean([r["acc"] for r in twin[-20:]])
    held = lb > 0.6 and lt < 0.25 * lb and at > 0.95 and ab < 0.85
    return held, f"last-20 loss bug {lb:.3g} twin {lt:.3g}; pixel accuracy bug {ab:.3g} twin {at:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
