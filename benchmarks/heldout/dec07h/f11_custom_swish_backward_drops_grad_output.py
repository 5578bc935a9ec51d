"""A 1-D conv audio classifier with a hand-written Swish whose backward forgets ``grad_output``.

Bug: a custom ``torch.autograd.Function`` for Swish returns the local derivative
``s * (1 + x * (1 - s))`` from ``backward`` instead of ``grad_output * (...)``. Every layer below
receives a "gradient" that does not depend on the loss: ~O(1) per element summed over all frames,
hundreds of times the true gradient, always pushing the same way. The convolutions run off.
Source: https://discuss.pytorch.org/t/why-is-the-gradient-multiplied-by-grad-output-in-this/139574
(a backward written as the bare "gradient formula"); https://pytorch.org/docs/stable/notes/extending.html;
Humbatova et al. ICSE 2020 (custom layer).
Fixed twin: ``return grad_output * s * (1 + x * (1 - s))``.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "custom Swish autograd.Function: backward returns the local derivative without multiplying by grad_output",
    "source": "https://discuss.pytorch.org/t/why-is-the-gradient-multiplied-by-grad-output-in-this/139574; https://pytorch.org/docs/stable/notes/extending.html",
    "arch": "1-D conv audio classifier (Conv1d x2 with custom Swish, pooling, linear)",
    "kind": ["exploding_gradient", "activation_explosion", "nonfinite", "loss_spike"],
    "layer": ["act1", "act2", "conv1", "conv2"],
    "step": [0, 5],
}


class SwishFn(torch.autograd.Function):
    fixed = False

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        local = s * (1 + x * (1 - s))
        return grad_output * local if SwishFn.fixed else local


class Swish(nn.Module):
    def forward(self, x):
        return SwishFn.apply(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(1, 16, 9, stride=2, padding=4)
        self.act1 = Swish()
        self.conv2 = nn.Conv1d(16, 16, 9, stride=2, padding=4)
        self.act2 = Swish()
        self.fc = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc(self.act2(self.conv2(self.act1(self.conv1(x)))).mean(-1))


def batch(g, n=32, t=256):
    y = torch.randint(0, 3, (n,), generator=g)
    freq = torch.tensor([0.02, 0.06, 0.15])[y]
    tt = torch.arange(t).float()
    x = torch.sin(2 * math.pi * freq[:, None] * tt + 6.28 * torch.rand(n, 1, generator=g))
    return (x + 0.3 * torch.randn(n, t, generator=g)).unsqueeze(1), y


def train(fixed=False, writer=None, probe=None):
    SwishFn.fixed = fixed
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("act2",)) if probe else None
    for _ in range(150):
        x, y = batch(g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    gb, gt = bug[0]["grad"]["conv1"], twin[0]["grad"]["conv1"]
    ab = max(r["act"]["act2"]["maxabs"] for r in bug[:30])
    at = max(r["act"]["act2"]["maxabs"] for r in twin[:30])
    lb, lt = mean([r["loss"] for r in bug[-20:]]), mean([r["loss"] for r in twin[-20:]])
    held = gb > 30 * gt and ab > 30 * at and not lb < 2 * lt
    return held, (f"step 0 conv1 grad bug/twin {gb / gt:.3g}; max |act2| steps 0-29 bug {ab:.3g} twin {at:.3g}; "
                  f"last-20 loss bug {lb:.3g} twin {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
