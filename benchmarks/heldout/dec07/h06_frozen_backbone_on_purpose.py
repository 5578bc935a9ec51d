"""Healthy: linear probing. A CNN backbone frozen ON PURPOSE (requires_grad=False), only the head trains.

Fools: every backbone layer has no gradient and never moves, for the whole run; this is the
documented intent (a "feature extractor" fine-tune), the head's loss falls.
Source of the recipe: PyTorch transfer learning tutorial, "ConvNet as fixed feature extractor"
(https://pytorch.org/tutorials/beginner/transfer_learning_tutorial.html).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "backbone frozen on purpose: no gradient, no update, all run long",
        "source": "https://pytorch.org/tutorials/beginner/transfer_learning_tutorial.html",
        "arch": "CNN backbone (frozen) + linear head"}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.backbone(x))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    for param in model.backbone.parameters():
        param.requires_grad = False
    model.backbone.eval()                           # frozen statistics too
    teacher = torch.randn(32, 3, generator=g)
    opt = torch.optim.Adam(model.head.parameters(), lr=0.1)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(300):
        x = torch.randn(32, 3, 8, 8, generator=g) * 3
        with torch.no_grad():
            f = model.backbone(x)
            y = (((f - f.mean(0)) / (f.std(0) + 1e-6)) @ teacher).argmax(1)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.7)


if __name__ == "__main__":
    sys.exit(main(globals()))
