"""A CNN encoder + MLP head where the encoder is run under torch.no_grad(): the encoder never trains.

Bug: observations are encoded inside ``with torch.no_grad():`` (written for the target-network
path and reused for the training path), so the convolutional encoder gets no gradient at all;
only the head learns, on random features.
Source: rll-research/cic issue #5 "No gradient through the cnn encoder"
(https://github.com/rll-research/cic/issues/5): "the observations are encoded inside torch.no_grad
which means ... the CNN weights will not be updated".
Fixed twin: the encoder runs with autograd on.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, series  # noqa: E402

CASE = {
    "bug": "encoder forward under torch.no_grad() in the training path",
    "source": "https://github.com/rll-research/cic/issues/5",
    "arch": "CNN encoder (Conv2d x3) + MLP head",
    "kind": ["no_gradient", "frozen_weights"],
    "layer": ["encoder.*", "encoder"],
    "step": [0, 2],
}


class Agent(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed
        self.encoder = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2), nn.ReLU(),
            nn.Conv2d(32, 32, 3), nn.ReLU(), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, obs):
        if self.fixed:
            z = self.encoder(obs)
        else:
            with torch.no_grad():
                z = self.encoder(obs)
        return self.head(z)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Agent(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        obs = torch.rand(32, 3, 15, 15, generator=g)
        y = (obs[:, 0, 3:8, 3:8].mean((1, 2)) - obs[:, 2].mean((1, 2))).unsqueeze(1) * 4
        opt.zero_grad()
        loss = crit(model(obs), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    gb = series(bug, "grad", "encoder.0")
    gt = series(twin, "grad", "encoder.0")
    b, t = mean([r["loss"] for r in bug[-30:]]), mean([r["loss"] for r in twin[-30:]])
    held = all(v is None for v in gb) and mean(gt) > 1e-4 and b > 1.5 * t
    return held, f"encoder.0 grad None on {sum(v is None for v in gb)}/{len(gb)} bug steps, twin mean {mean(gt):.3g}; last-30 loss bug {b:.3g} twin {t:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
