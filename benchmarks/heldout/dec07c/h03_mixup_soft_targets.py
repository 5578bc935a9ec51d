"""Healthy: a CNN trained with mixup: soft mixed targets keep the training loss high, accuracy is fine.

Each batch is mixed with a shuffled copy of itself (lambda ~ Beta(0.4, 0.4)) and trained on the
mixed soft labels: the loss cannot reach 0 (its floor is the mixed labels' entropy) and stays
well above what a plain classifier shows, while clean accuracy goes to ~100 %.
Source: Zhang, Cisse, Dauphin & Lopez-Paz, "mixup: Beyond Empirical Risk Minimization", ICLR 2018,
sec. 2 and fig. 1b.
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {
    "healthy": True,
    "bug": "mixup (alpha 0.4): loss floor well above 0 from soft mixed targets",
    "source": "Zhang et al. ICLR 2018 (mixup) sec. 2",
    "arch": "CNN classifier (Conv2d x2 + linear), 4 classes of 12x12 images",
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, stride=2)
        self.act2 = nn.ReLU()
        self.fc = nn.Linear(16 * 6 * 6, 4)

    def forward(self, x):
        return self.fc(self.act2(self.conv2(self.act1(self.conv1(x)))).flatten(1))


def batch(g, n=32):
    y = torch.randint(0, 4, (n,), generator=g)
    x = torch.randn(n, 1, 12, 12, generator=g) * 0.3
    for i in range(n):
        r, c = divmod(int(y[i]), 2)
        x[i, 0, r * 6:r * 6 + 6, c * 6:c * 6 + 6] += 1.0
    return x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    beta = torch.distributions.Beta(0.4, 0.4)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for step in range(200):
        x, y = batch(g)
        lam = float(beta.sample())
        perm = torch.randperm(len(y), generator=g)
        xm = lam * x + (1 - lam) * x[perm]
        target = lam * F.one_hot(y, 4).float() + (1 - lam) * F.one_hot(y[perm], 4).float()
        opt.zero_grad()
        loss = F.cross_entropy(model(xm), target)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            acc = None
            if step == 199:
                with torch.no_grad():
                    xe, ye = batch(g, 256)
                    acc = float((model(xe).argmax(1) == ye).float().mean())
            p.step(loss, acc=acc)
        opt.step()


def truth(bug, twin):
    fell, detail = loss_fell(bug, 0.8)
    acc = bug[-1]["acc"]
    held = fell and acc > 0.9
    return held, f"{detail}; clean accuracy at the end {acc:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
