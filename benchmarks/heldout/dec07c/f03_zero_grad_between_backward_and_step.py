"""A CNN whose loop calls optimizer.zero_grad() between backward() and step(): nothing is updated.

Bug: ``loss.backward(); optimizer.zero_grad(); optimizer.step()``. zero_grad (set_to_none=True by
default) throws the fresh gradients away just before the step, so Adam skips every parameter:
the weights never move and the loss stays at its start.
Source: https://velog.io/@rhss10/기본-optimizer.zerograd는-어디에-넣어주어야-할까 (zero_grad may go
anywhere except between loss.backward() and optimizer.step());
https://theneuralbase.com/pytorch/learn/beginner/forward-pass-loss-backward-step/ ("will break if
reordered").
Fixed twin: zero_grad() before the forward pass.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "optimizer.zero_grad() between loss.backward() and optimizer.step(): every step applies nothing",
    "source": "https://velog.io/@rhss10 (zero_grad placement); https://theneuralbase.com/pytorch/learn/beginner/forward-pass-loss-backward-step/",
    "arch": "small CNN classifier (Conv2d x2 + linear), 4 classes of 12x12 images",
    "kind": ["frozen_weights", "no_gradient", "loss_plateau"],
    "layer": ["<optimizer>", "<loss>", "conv1"],
    "step": [0, 10],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, stride=2)
        self.act2 = nn.ReLU()
        self.fc = nn.Linear(16 * 6 * 6, 4)

    def forward(self, x):
        return self.fc(self.act2(self.conv2(self.act1(self.conv1(x)))).flatten(1))


def batch(g, n=32):
    y = torch.randint(0, 4, (n,), generator=g)
    x = torch.randn(n, 1, 12, 12, generator=g) * 0.3
    for i in range(n):  # class k: a bright 6x6 square in quadrant k
        r, c = divmod(int(y[i]), 2)
        x[i, 0, r * 6:r * 6 + 6, c * 6:c * 6 + 6] += 1.0
    return x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        x, y = batch(g)
        if fixed:
            opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        if not fixed:
            opt.zero_grad()
        opt.step()


def truth(bug, twin):
    mb = abs(bug[-1]["weight"]["fc"] - bug[0]["weight"]["fc"])
    mt = abs(twin[-1]["weight"]["fc"] - twin[0]["weight"]["fc"])
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = mb == 0.0 and mt > 1e-2 and lb > 3 * lt
    return held, f"fc weight-norm change bug {mb:.3g} twin {mt:.3g}; last-30 loss bug {lb:.3g} twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
