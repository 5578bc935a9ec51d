"""Fine-tuning a small "pretrained" CNN whose new head is attached after the optimizer was built.

Bug: ``opt = Adam(model.parameters())`` then ``model.fc = nn.Linear(...)`` for the new task: the
optimizer holds the old head's parameters, the new head gets gradients every step but is never
updated, and the (frozen-on-purpose) backbone cannot compensate.
Source: torch.optim notes ("parameters ... should remain the same objects over the whole
lifecycle of optimizer creation and usage", https://pytorch.org/docs/stable/optim.html); the
transfer-learning order "replace the head, then build the optimizer"
(https://theneuralbase.com/pytorch/learn/intermediate/replacing-the-classification-head/);
Humbatova et al. ICSE 2020, Training > Optimiser.
Fixed twin: the optimizer is built after the head is replaced.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "new classification head attached after the optimizer was built: never updated",
    "source": "https://pytorch.org/docs/stable/optim.html; https://theneuralbase.com/pytorch/learn/intermediate/replacing-the-classification-head/",
    "arch": "CNN backbone (frozen on purpose) + new linear head",
    "kind": ["frozen_weights"],
    "layer": ["fc"],
    "step": [0, 5],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc(self.features(x))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    for param in model.features.parameters():
        param.requires_grad = False                  # the backbone is frozen on purpose
    if fixed:
        model.fc = nn.Linear(32, 3)
        opt = torch.optim.Adam([q for q in model.parameters() if q.requires_grad], lr=3e-2)
    else:
        opt = torch.optim.Adam([q for q in model.parameters() if q.requires_grad], lr=3e-2)
        model.fc = nn.Linear(32, 3)
    teacher = torch.randn(32, 3, generator=g)          # the pretrained features carry the task
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        x = torch.randn(32, 3, 8, 8, generator=g) * 3
        with torch.no_grad():
            f = model.features(x)
            y = (((f - f.mean(0)) / (f.std(0) + 1e-6)) @ teacher).argmax(1)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    moved_b = abs(bug[-1]["weight"]["fc"] - bug[0]["weight"]["fc"])
    moved_t = abs(twin[-1]["weight"]["fc"] - twin[0]["weight"]["fc"])
    gb = mean([r["grad"]["fc"] for r in bug])
    b, t = mean([r["loss"] for r in bug[-30:]]), mean([r["loss"] for r in twin[-30:]])
    held = moved_b == 0.0 and moved_t > 0.1 and gb > 1e-3 and b > t + 0.05
    return held, f"fc weight norm change bug {moved_b:.3g} twin {moved_t:.3g}; bug fc grad mean {gb:.3g}; last-30 loss bug {b:.3g} twin {t:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
