"""Healthy: one residual conv block applied 6 times with the same weights (a recurrent / weight-tied CNN).

The shared block's gradient is the sum of its 6 uses, so its gradient norm is several times the
other layers' and its weights change faster; the residual form x + 0.5 * block(x) with GroupNorm keeps
the unrolled net stable, and it trains (is the bright dot in the left half, with a dark dot as a
distractor?).
Source: Liang & Hu, "Recurrent Convolutional Neural Network for Object Recognition", CVPR 2015;
Bai, Kolter & Koltun, "Deep Equilibrium Models", NeurIPS 2019 (weight-tied layers); Dehghani et al.
ICLR 2019 (Universal Transformers: one block repeated).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {
    "healthy": True,
    "bug": "weight-tied residual conv block unrolled 6x: its gradient sums 6 uses, larger than the others'",
    "source": "Liang & Hu CVPR 2015 (recurrent CNN); Bai et al. NeurIPS 2019 (weight-tied layers)",
    "arch": "stem conv + one GroupNorm residual block applied 6 times + linear head (12x12 images)",
}


class SharedBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, padding=1)
        self.norm = nn.GroupNorm(4, ch)
        self.act = nn.ReLU()

    def forward(self, x):
        return x + 0.5 * self.act(self.norm(self.conv(x)))


class RecurrentCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 16, 3, padding=1)
        self.stem_act = nn.ReLU()
        self.block = SharedBlock(16)
        self.pool = nn.AdaptiveMaxPool2d(2)
        self.fc = nn.Linear(16 * 4, 2)

    def forward(self, x):
        h = self.stem_act(self.stem(x))
        for _ in range(6):
            h = self.block(h)
        return self.fc(self.pool(h).flatten(1))


def batch(g, n=32):
    x = 0.2 * torch.randn(n, 1, 12, 12, generator=g)
    pos = torch.randint(0, 12, (n, 4), generator=g)
    for i in range(n):
        x[i, 0, pos[i, 0], pos[i, 1]] += 2.0
        x[i, 0, pos[i, 2], pos[i, 3]] -= 2.0
    y = (pos[:, 1] < 6).long()
    return x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = RecurrentCNN()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x, y = batch(g)
        opt.zero_grad()
        out = model(x)
        loss = crit(out, y)
        loss.backward()
        if p:
            p.step(loss, acc=float((out.argmax(1) == y).float().mean()))
        opt.step()


def truth(bug, twin):
    fell, detail = loss_fell(bug, 0.5)
    acc = mean([r["acc"] for r in bug[-30:]])
    gb = mean([r["grad"]["block.conv"] for r in bug[:20]])
    gs = mean([r["grad"]["stem"] for r in bug[:20]])
    return fell and acc > 0.85, (f"{detail}; last-30 accuracy {acc:.3g}; first-20 grad norm shared conv {gb:.3g} "
                                 f"stem {gs:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
