"""Healthy: a PointNet classifier on small point clouds, global max-pooling over the points.

Fools: the symmetric max-pool passes gradient to one point per feature channel, so most points'
features get exactly zero gradient each step (sparse by design), and the shared per-point MLP has
ReLU units that are zero for most points; the classifier still learns the shapes.
Source of the recipe: Qi et al. CVPR 2017, "PointNet" sec. 4.2 (shared MLP + max pooling).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "max-pool over 128 points: most points get zero gradient; per-point ReLU mostly zero",
        "source": "Qi et al. CVPR 2017 sec. 4.2", "arch": "PointNet (shared Conv1d MLP + global max pool + MLP head)"}


def _clouds(g, y):
    n = y.shape[0]
    u = torch.rand(n, 128, 2, generator=g)
    th, ph = u[..., 0] * 6.283, u[..., 1] * 3.1416
    sphere = torch.stack([ph.sin() * th.cos(), ph.sin() * th.sin(), ph.cos()], -1)
    cube = torch.rand(n, 128, 3, generator=g) * 2 - 1
    face = torch.randint(0, 3, (n, 128), generator=g)
    cube.scatter_(2, face.unsqueeze(-1), torch.sign(torch.randn(n, 128, 1, generator=g)))
    cyl = torch.stack([th.cos(), th.sin(), u[..., 1] * 2 - 1], -1)
    pts = torch.where((y == 0).view(-1, 1, 1), sphere, torch.where((y == 1).view(-1, 1, 1), cube, cyl))
    scale = 0.5 + torch.rand(n, 1, 1, generator=g)
    return (pts * scale + 0.03 * torch.randn(n, 128, 3, generator=g)).transpose(1, 2)


class PointNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.point_mlp = nn.Sequential(nn.Conv1d(3, 32, 1), nn.ReLU(), nn.Conv1d(32, 64, 1), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 3))

    def forward(self, x):
        return self.head(self.point_mlp(x).max(dim=2).values)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = PointNet()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("point_mlp.3",)) if probe else None
    for _ in range(160):
        y = torch.randint(0, 3, (32,), generator=g)
        x = _clouds(g, y)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.4)
    dead = max(r["act"]["point_mlp.3"]["zero"] for r in bug[-20:])
    return fell and dead < 0.95, f"{said}; per-point ReLU zero fraction (last 20, max) {dead:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
