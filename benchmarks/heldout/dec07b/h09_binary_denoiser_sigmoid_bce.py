"""Healthy: a convolutional denoiser of binary images with a Sigmoid output and BCELoss.

Fools: the targets are exactly 0 or 1, so the Sigmoid output legitimately saturates: most pixels
end above 0.99 or below 0.01 (a "saturated activation" that is the point), and the loss goes
near 0.
Source of the recipe: binarised-MNIST style reconstruction with Bernoulli likelihood (Kingma &
Welling ICLR 2014 appendix C.1; pytorch/examples vae uses BCE on sigmoid outputs).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "Sigmoid output saturated at 0/1 on purpose (binary targets, BCE)",
        "source": "Kingma & Welling ICLR 2014 appendix C.1; pytorch/examples vae", "arch": "conv denoiser (Conv2d x3) + Sigmoid"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(16, 1, 3, padding=1), nn.Sigmoid())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.BCELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("5",)) if probe else None
    for _ in range(200):
        clean = (torch.rand(32, 1, 4, 4, generator=g) < 0.4).float().repeat_interleave(3, 2).repeat_interleave(3, 3)
        flip = torch.rand(32, 1, 12, 12, generator=g) < 0.08
        noisy = torch.where(flip, 1 - clean, clean)
        opt.zero_grad()
        loss = crit(model(noisy), clean)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.3)
    sat = bug[-1]["act"]["5"]["sat99"]
    return fell, f"{said}; sigmoid outputs >= 0.99 at the last step {sat:.2f} (low side not counted)"


if __name__ == "__main__":
    sys.exit(main(globals()))
