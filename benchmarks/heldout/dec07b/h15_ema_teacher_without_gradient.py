"""Healthy: a mean-teacher model: a student trained by SGD and an EMA teacher that gets no gradient.

Fools: half the watched model (the teacher) has ``requires_grad=False`` and never a gradient, yet
its weights move every step (the EMA update, outside the optimizer); its outputs are a target
for the student's consistency loss.
Source of the recipe: Tarvainen & Valpola NeurIPS 2017 (Mean Teacher) sec. 2; Grill et al.
NeurIPS 2020 (BYOL) sec. 3.1 (target network as an exponential moving average).
"""

import copy
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "EMA teacher: no gradient ever, weights moved by an update outside the optimizer",
        "source": "Tarvainen & Valpola NeurIPS 2017 sec. 2; Grill et al. NeurIPS 2020 sec. 3.1",
        "arch": "student MLP + EMA teacher copy in one module"}


class MeanTeacher(nn.Module):
    def __init__(self):
        super().__init__()
        self.student = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 4))
        self.teacher = copy.deepcopy(self.student)
        for q in self.teacher.parameters():
            q.requires_grad_(False)

    def forward(self, x):
        noisy = x + 0.3 * torch.randn_like(x)
        return self.student(noisy), self.teacher(x)

    @torch.no_grad()
    def ema(self, decay=0.95):
        for t, s in zip(self.teacher.parameters(), self.student.parameters()):
            t.mul_(decay).add_(s, alpha=1 - decay)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = MeanTeacher()
    proto = torch.randn(4, 10, generator=g)
    opt = torch.optim.SGD(model.student.parameters(), lr=0.05, momentum=0.9)
    ce = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        y = torch.randint(0, 4, (64,), generator=g)
        x = proto[y] + 0.8 * torch.randn(64, 10, generator=g)
        labelled = torch.arange(64) < 16
        opt.zero_grad()
        s_out, t_out = model(x)
        loss = ce(s_out[labelled], y[labelled]) + (s_out.softmax(-1) - t_out.softmax(-1)).pow(2).sum(1).mean()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()
        model.ema()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.5)
    no_grad = all(r["grad"]["teacher.0"] is None for r in bug)
    moved = abs(bug[-1]["weight"]["teacher.0"] - bug[0]["weight"]["teacher.0"]) > 1e-3
    return fell and no_grad and moved, f"{said}; teacher.0 never a gradient: {no_grad}, its weights moved: {moved}"


if __name__ == "__main__":
    sys.exit(main(globals()))
