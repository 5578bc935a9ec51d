"""A custom straight-through clamp (``torch.autograd.Function``) whose backward returns ``-grad_output``.

Bug: the hand-written straight-through estimator of a hard clamp returns ``-grad_output`` (the
sign of a "reversal" layer copied into it), so every layer below it is trained by gradient ASCENT
on the loss: the loss climbs from its start instead of falling and the first layer's weights grow
without bound (measured against the twin with the probe). Loud: the loss rises step after step.
Source: PyTorch docs "Extending torch.autograd" (backward must return the gradient of the
output w.r.t. the inputs; ``torch.autograd.gradcheck`` catches this,
https://pytorch.org/docs/stable/notes/extending.html); gradient reversal layers (Ganin & Lempitsky
ICML 2015) are the same code with the minus on purpose.
Fixed twin: ``return grad_output``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "custom straight-through clamp returns -grad_output: the layers below are trained by gradient ascent",
    "source": "https://pytorch.org/docs/stable/notes/extending.html; Ganin & Lempitsky ICML 2015 (reversal on purpose)",
    "arch": "MLP with a hard-clamp straight-through activation (quantisation-aware)",
    "kind": ["exploding_gradient", "activation_explosion", "loss_spike", "loss_plateau", "saturated_activation"],
    "layer": ["fc1", "clamp", "<loss>"],
    "step": [0, 60],
}


class ClampSTE(torch.autograd.Function):
    sign = -1.0

    @staticmethod
    def forward(ctx, x):
        return x.clamp(-1, 1)

    @staticmethod
    def backward(ctx, grad_output):
        return ClampSTE.sign * grad_output


class Clamp(nn.Module):
    def __init__(self, sign):
        super().__init__()
        self.sign = sign

    def forward(self, x):
        ClampSTE.sign = self.sign
        return ClampSTE.apply(x)


class Net(nn.Module):
    def __init__(self, sign):
        super().__init__()
        self.fc1, self.clamp, self.fc2 = nn.Linear(16, 64), Clamp(sign), nn.Linear(64, 4)

    def forward(self, x):
        return self.fc2(self.clamp(self.fc1(x)))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    centers = torch.randn(4, 16, generator=g)
    model = Net(1.0 if fixed else -1.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("fc1", "clamp")) if probe else None
    for _ in range(160):
        y = torch.randint(0, 4, (64,), generator=g)
        x = centers[y] + 0.8 * torch.randn(64, 16, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    wb = bug[-1]["weight"]["fc1"] / bug[0]["weight"]["fc1"]
    wt = twin[-1]["weight"]["fc1"] / twin[0]["weight"]["fc1"]
    lb = sum(r["loss"] for r in bug[-20:]) / 20
    lt = sum(r["loss"] for r in twin[-20:]) / 20
    fb = sum(r["loss"] for r in bug[:5]) / 5
    held = wb > 3 * wt and lb > 10 * lt and lb > 0.5 * fb
    return held, (f"fc1 weight norm growth bug {wb:.3g}x, twin {wt:.3g}x; loss bug first 5 {fb:.3g} -> last 20 {lb:.3g}, "
                  f"twin last 20 {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
