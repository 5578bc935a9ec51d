"""A convolutional depth-style regressor whose loop calls scheduler.step() *instead of* optimizer.step().

Bug: ``if scheduler: scheduler.step() else: optimizer.step()`` — with a scheduler configured the
optimizer is never stepped: gradients are computed and zeroed every batch, the rate schedule runs,
and no weight ever changes; the loss stays at its initial value.
Source: https://github.com/ClementPinard/SfmLearner-Pytorch/issues/5 ("scheduler.step() only
changes learning rate, but does not perform optimizer step").
Fixed twin: ``optimizer.step()`` then ``scheduler.step()``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "scheduler.step() called in place of optimizer.step(): gradients every step, no update ever",
    "source": "https://github.com/ClementPinard/SfmLearner-Pytorch/issues/5",
    "arch": "small encoder-decoder CNN regressor (dense per-pixel output)",
    "kind": ["frozen_weights", "loss_plateau"],
    "layer": ["<optimizer>"],
    "step": [0, 5],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1 = nn.Conv2d(1, 16, 3, padding=1)
        self.enc2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.dec = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.out = nn.Conv2d(16, 1, 3, padding=1)
        self.act = nn.GELU()

    def forward(self, x):
        h1 = self.act(self.enc1(x))
        return self.out(self.act(self.dec(self.act(self.enc2(h1)))) + h1)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=50, gamma=0.5)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        x = torch.rand(16, 1, 16, 16, generator=g)
        y = nn.functional.avg_pool2d(x, 3, 1, 1) * 2 - 0.5  # a smoothed, shifted target map
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        if fixed:
            opt.step()
            scheduler.step()
        elif scheduler:
            scheduler.step()
        else:
            opt.step()


def truth(bug, twin):
    moved = abs(bug[-1]["weight"]["out"] - bug[0]["weight"]["out"])
    moved_t = abs(twin[-1]["weight"]["out"] - twin[0]["weight"]["out"])
    g = mean([r["grad"]["out"] for r in bug])
    lb, lt = mean([r["loss"] for r in bug[-30:]]), mean([r["loss"] for r in twin[-30:]])
    held = moved == 0 and moved_t > 0.05 and g > 1e-3 and lt < 0.2 * lb
    return held, (f"out weight-norm change bug {moved:.3g} twin {moved_t:.3g} (bug out grad mean {g:.3g}); "
                  f"last-30 loss bug {lb:.3g} twin {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
