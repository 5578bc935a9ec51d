"""A CNN whose SGD rate applies the linear scaling rule without the /256: lr = 0.1 * 128 = 12.8.

Bug: the "linear scaling rule" (lr = base_lr * batch_size / 256) written as
``lr = base_lr * batch_size``; with base_lr 0.1 and batch 128 the rate is 12.8 instead of 0.05.
SGD with momentum throws the convolutions far off in the first steps: their ReLUs die (gradient
exactly 0 from step ~4) and the linear head's loss swings above its initial value for the rest.
Source: Goyal et al. 2017 "Accurate, Large Minibatch SGD" sec. 2.1 (lr = 0.1 * kn / 256);
https://github.com/NVIDIA/apex/issues/407 (lr * batch_size * world_size / 256);
https://github.com/open-mmlab/mmdetection/issues/1710 (NaN after scaling the lr up by batch size).
Fixed twin: lr = 0.1 * 128 / 256 = 0.05.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "linear-scaling rule without /256: SGD lr = 0.1 * batch 128 = 12.8",
    "source": "Goyal et al. 2017 arXiv:1706.02677 sec. 2.1; https://github.com/NVIDIA/apex/issues/407; https://github.com/open-mmlab/mmdetection/issues/1710",
    "arch": "small CNN classifier (Conv2d x2 + linear), SGD momentum",
    "kind": ["exploding_gradient", "nonfinite", "loss_spike", "activation_explosion", "dead_activation"],
    "layer": ["<optimizer>", "conv1", "conv2", "act1", "act2", "fc"],
    "step": [0, 8],
}

BATCH = 128


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.act1 = nn.ReLU()
        self.act2 = nn.ReLU()
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        h = self.act1(self.conv1(x))
        h = self.act2(self.conv2(h))
        return self.fc(h.mean((2, 3)))


def batch(g):
    y = torch.randint(0, 4, (BATCH,), generator=g)
    x = 0.3 * torch.randn(BATCH, 1, 12, 12, generator=g)
    for i in range(BATCH):  # a bright bar whose position is the class
        q = int(y[i])
        x[i, 0, 3 * q:3 * q + 3, :] += 1.0
    return x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    base_lr = 0.1
    lr = base_lr * BATCH / 256 if fixed else base_lr * BATCH
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        x, y = batch(g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    gb = mean([r["grad"]["conv1"] for r in bug[5:40]])
    gt = mean([r["grad"]["conv1"] for r in twin[5:40]])
    jump = max(r["loss"] for r in bug[:8]) / bug[0]["loss"]
    lb, lt = mean([r["loss"] for r in bug[-20:]]), mean([r["loss"] for r in twin[-20:]])
    held = gb < 0.05 * gt and jump > 1.1 and lb > 3 * lt
    return held, (f"conv1 grad steps 5-40 bug {gb:.2g} twin {gt:.2g}; bug max loss in steps 0-7 x{jump:.3g} of "
                  f"step 0; last-20 loss bug {lb:.3g} twin {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
