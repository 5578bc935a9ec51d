"""Healthy: an MLP with 90 % of its hidden weights pruned (torch.nn.utils.prune masks), trained on.

``prune.l1_unstructured(amount=0.9)`` on the two hidden layers: 90 % of their weights are zero and
stay zero (the mask also zeroes their gradients), so most weights never move. The remaining 10 %
train the network normally.
Source: Han, Pool, Tran & Dally, "Learning both Weights and Connections", NeurIPS 2015, sec. 3;
PyTorch pruning tutorial (torch.nn.utils.prune, l1_unstructured).
"""

import os
import sys

import torch
from torch import nn
from torch.nn.utils import prune

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {
    "healthy": True,
    "bug": "90% of the hidden weights pruned by fixed masks: zero and unchanging, gradients masked",
    "source": "Han et al. NeurIPS 2015 sec. 3; torch.nn.utils.prune tutorial",
    "arch": "MLP classifier (32 -> 256 -> 256 -> 5, ReLU), l1-unstructured pruning 90%",
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 256)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(256, 256)
        self.act2 = nn.ReLU()
        self.out = nn.Linear(256, 5)

    def forward(self, x):
        return self.out(self.act2(self.fc2(self.act1(self.fc1(x)))))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    centers = torch.randn(5, 32, generator=g)
    model = Net()
    prune.l1_unstructured(model.fc1, "weight", amount=0.9)
    prune.l1_unstructured(model.fc2, "weight", amount=0.9)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("act1", "act2")) if probe else None
    for _ in range(200):
        y = torch.randint(0, 5, (64,), generator=g)
        x = centers[y] + 0.8 * torch.randn(64, 32, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, detail = loss_fell(bug, 0.2)
    dead = max(mean([r["act"][a]["zero"] for r in bug[-20:]]) for a in ("act1", "act2"))
    held = fell and dead < 0.9
    return held, f"{detail}; largest ReLU zero fraction (last 20) {dead:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
