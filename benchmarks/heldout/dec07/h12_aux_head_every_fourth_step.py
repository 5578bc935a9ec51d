"""Healthy: a multi-task CNN whose auxiliary head is trained only on every 4th step.

Fools: the auxiliary head has no gradient (``.grad`` None after ``zero_grad(set_to_none=True)``)
on three steps out of four and does not move on them: an intermittent "no gradient" by design.
Source of the recipe: auxiliary losses applied on a subset of steps (e.g. the auxiliary
classifiers of GoogLeNet, Szegedy et al. CVPR 2015, sec. 5, weighted and optional).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "aux head gets a gradient only every 4th step",
        "source": "Szegedy et al. CVPR 2015 sec. 5 (auxiliary classifiers)", "arch": "CNN trunk with main and auxiliary heads"}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1),
                                   nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.main_head = nn.Linear(64, 4)
        self.aux_head = nn.Linear(64, 1)

    def forward(self, x):
        z = self.trunk(x)
        return self.main_head(z), self.aux_head(z)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    proto = torch.randn(4, 1, 8, 8, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for step in range(200):
        y = torch.randint(0, 4, (32,), generator=g)
        x = proto[y] + 0.8 * torch.randn(32, 1, 8, 8, generator=g)
        opt.zero_grad(set_to_none=True)
        logits, aux = model(x)
        loss = crit(logits, y)
        if step % 4 == 0:
            loss = loss + 0.3 * nn.functional.mse_loss(aux.squeeze(1), x.mean((1, 2, 3)))
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.5)
    none = sum(r["grad"]["aux_head"] is None for r in bug)
    return fell and none == 150, f"{said}; aux_head without grad on {none}/200 steps"


if __name__ == "__main__":
    sys.exit(main(globals()))
