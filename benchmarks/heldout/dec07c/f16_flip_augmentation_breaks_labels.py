"""A CNN that classifies left- vs right-pointing arrows, trained with random horizontal flips.

Bug: a standard augmentation pipeline (``RandomHorizontalFlip(p=0.5)``) applied to a task whose
label is the horizontal direction: a flipped left arrow is a right arrow with the label "left".
Half of the labels become wrong at random, the two classes have the same input distribution, and
the loss cannot leave ln 2.
Source: Shorten & Khoshgoftaar, "A survey on Image Data Augmentation for Deep Learning", J. Big
Data 2019, sec. "Geometric transformations" (the safety of an augmentation: label-preserving or
not, e.g. 6 vs 9 for rotations); Humbatova et al. ICSE 2020, training data quality.
Fixed twin: no horizontal flip (a vertical flip keeps the label and is used instead).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "RandomHorizontalFlip on a left/right arrow task: half the samples carry the opposite label",
    "source": "Shorten & Khoshgoftaar J. Big Data 2019 (augmentation safety); Humbatova et al. ICSE 2020",
    "arch": "CNN classifier (Conv2d x2 + global max pool + linear), 2 classes of 16x16 images",
    "kind": ["loss_plateau"],
    "layer": ["<loss>", "<input>"],
    "step": [0, 150],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.act2 = nn.ReLU()
        self.fc = nn.Linear(16, 2)

    def forward(self, x):
        return self.fc(self.act2(self.conv2(self.act1(self.conv1(x)))).amax((2, 3)))


def arrows(g, n=32):
    y = torch.randint(0, 2, (n,), generator=g)
    x = torch.randn(n, 1, 16, 16, generator=g) * 0.2
    for i in range(n):
        r = int(torch.randint(3, 13, (1,), generator=g))
        x[i, 0, r, 3:13] += 1.0  # the shaft
        for d in range(1, 4):  # the head, on the right for class 1, on the left for class 0
            c = 12 - d if int(y[i]) == 1 else 3 + d
            x[i, 0, max(r - d, 0), c] += 1.0
            x[i, 0, min(r + d, 15), c] += 1.0
    return x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x, y = arrows(g)
        flip = torch.rand(len(y), generator=g) < 0.5
        x[flip] = x[flip].flip(-2 if fixed else -1)  # twin: vertical flip (label-preserving)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = lb > 0.6 and lt < 0.2
    return held, f"last-30 loss bug {lb:.3g} twin {lt:.3g} (ln 2 = 0.693)"


if __name__ == "__main__":
    sys.exit(main(globals()))
