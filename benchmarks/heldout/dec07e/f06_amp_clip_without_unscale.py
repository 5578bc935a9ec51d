"""Gradient clipping under a GradScaler without ``scaler.unscale_``: the clip acts on 65536x gradients.

Bug: the loop was moved to mixed precision (``scaler.scale(loss).backward()``, ``scaler.step(opt)``)
and kept ``clip_grad_norm_(params, 1.0)`` right after backward. The gradients it clips are still
multiplied by the loss scale (2**16), so nearly every step clips a norm of ~1e4 down to 1, then
``scaler.step`` divides by 65536: the real update is ~1e-5 of what it should be and SGD barely moves.
Source: PyTorch AMP examples, "Working with Unscaled Gradients / Gradient clipping"
(https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-clipping: unscale_ before clipping,
otherwise the clip threshold applies to scaled gradients); apex docs "Gradient clipping ... if Amp
uses loss scaling, gradients must be clipped after they have been unscaled".
Fixed twin: ``scaler.unscale_(opt)`` before the clip.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "clip_grad_norm_(max_norm=1) applied to loss-scaled gradients (no scaler.unscale_): updates ~1e-5 too small",
    "source": "https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-clipping",
    "arch": "CNN classifier (4 classes of 12x12 images), SGD + GradScaler",
    "kind": ["vanishing_gradient", "frozen_weights", "loss_plateau"],
    "layer": ["<optimizer>", "<loss>"],
    "step": [0, 10],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.act2 = nn.ReLU()
        self.fc = nn.Linear(16 * 6 * 6, 4)

    def forward(self, x):
        return self.fc(self.act2(self.conv2(self.act1(self.conv1(x)))).flatten(1))


def batch(g, n=32):
    y = torch.randint(0, 4, (n,), generator=g)
    x = torch.randn(n, 1, 12, 12, generator=g) * 0.5
    for i in range(n):
        k = int(y[i])
        x[i, 0, :, 3 * k:3 * k + 3] += 1.0  # a bright vertical band whose column is the class
    return x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit, scaler=scaler)
    p = probe(model) if probe else None
    for _ in range(150):
        x, y = batch(g)
        opt.zero_grad()
        loss = crit(model(x), y)
        scaler.scale(loss).backward()
        if fixed:
            scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if p:
            before = [q.detach().clone() for q in model.parameters()]
        scaler.step(opt)
        if p:
            moved = sum(float((q.detach() - b).pow(2).sum()) for q, b in zip(model.parameters(), before)) ** 0.5
            p.step(loss, moved=moved)
        scaler.update()


def truth(bug, twin):
    mb = mean([r["moved"] for r in bug])
    mt = mean([r["moved"] for r in twin])
    lb = mean([r["loss"] for r in bug[-20:]])
    lt = mean([r["loss"] for r in twin[-20:]])
    held = mb < 1e-3 * mt and lb > 1.2 and lt < 0.3
    return held, f"mean parameter update norm bug {mb:.3g} twin {mt:.3g}; last-20 loss bug {lb:.3g} twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
