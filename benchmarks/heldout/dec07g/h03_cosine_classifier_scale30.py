"""A cosine classifier: L2-normalised features and class weights, logits = 30 * cosine.

Healthy, built to fool: the head's weight norm is irrelevant (normalised), so its gradient is
orthogonal to the weights and small; the logits are pinned to [-30, 30] and the softmax saturates
once the classes separate; the loss starts near ln K and falls to ~0.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean, series  # noqa: E402

CASE = {"healthy": True, "arch": "MLP embedder + normalised cosine head (s=30), 10 classes",
        "fools": "scale-invariant head weights, saturated softmax at 30x cosine"}


class CosineHead(nn.Module):
    def __init__(self, d, k, s=30.0):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k, d))
        self.s = s

    def forward(self, x):
        return self.s * F.normalize(x, dim=1) @ F.normalize(self.weight, dim=1).t()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act1 = nn.Linear(32, 128), nn.ReLU()
        self.fc2 = nn.Linear(128, 64)
        self.head = CosineHead(64, 10)

    def forward(self, x):
        return self.head(self.fc2(self.act1(self.fc1(x))))


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    protos = torch.randn(10, 32, generator=torch.Generator().manual_seed(6))
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("act1",)) if probe else None
    for _ in range(200):
        y = torch.randint(0, 10, (64,), generator=g)
        x = protos[y] + 0.9 * torch.randn(64, 32, generator=g)
        logits = model(x)
        loss = crit(logits, y)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss, acc=float((logits.argmax(1) == y).float().mean()))
        opt.step()


def truth(bug, twin):
    ok, detail = loss_fell(bug, 0.2)
    acc = mean([r["acc"] for r in bug[-20:]])
    dead = mean(series(bug[-20:], "act", "act1", "zero"))
    return ok and acc > 0.9 and dead < 0.9, f"{detail}; acc {acc:.2f}; act1 zero fraction {dead:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
