"""Healthy: a student MLP distilled from a fixed teacher with temperature 4 (KL * T^2): a loss floor above 0.

The student matches the teacher's softened distribution (T = 4); the loss is the KL divergence
times T^2, small from the start (soft targets are close to uniform) and falling to a floor set by
what the smaller student can represent. The teacher is a fixed network outside the watched model.
Source: Hinton, Vinyals & Dean, "Distilling the Knowledge in a Neural Network", arXiv:1503.02531,
sec. 2 (soft targets at high temperature, gradients scaled by T^2).
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
    "bug": "knowledge distillation at T=4 from a fixed teacher: small soft-target loss with a floor",
    "source": "Hinton, Vinyals & Dean arXiv:1503.02531 sec. 2",
    "arch": "student MLP (24 -> 32 -> 10) distilled from a fixed teacher MLP (24 -> 256 -> 256 -> 10)",
}

T = 4.0


class Student(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(24, 32)
        self.act = nn.GELU()
        self.out = nn.Linear(32, 10)

    def forward(self, x):
        return self.out(self.act(self.fc1(x)))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    teacher = nn.Sequential(nn.Linear(24, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 10))
    for prm in teacher.parameters():
        prm.requires_grad_(False)
        prm.mul_(2.0)  # a confident teacher
    model = Student()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randn(64, 24, generator=g)
        with torch.no_grad():
            soft = F.softmax(teacher(x) / T, -1)
        opt.zero_grad()
        loss = F.kl_div(F.log_softmax(model(x) / T, -1), soft, reduction="batchmean") * T * T
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.6)


if __name__ == "__main__":
    sys.exit(main(globals()))
