"""An MLP whose hand-written ReLU autograd.Function returns the saved input as its gradient.

Bug: the custom ReLU (written as in the PyTorch "Defining new autograd Functions" example) returns
``input.clamp(min=0)`` from ``backward`` instead of ``grad_output`` masked by ``input > 0``. The
gradient sent to the layer below is then its own positive activations, whatever the loss: SGD
pushes every unit that fires down until it stops firing, and the hidden ReLUs die.
Source: the PyTorch tutorial example MyReLU ("Learning PyTorch with Examples",
beginner_source/examples_autograd/two_layer_net_custom_function.py; copy at
https://gist.github.com/Hanrui-Wang/bf225dc0ccb91cdce160539c0acc853a): backward must start from
grad_output; Humbatova et al. ICSE 2020, custom layer / wrong gradient computation.
Fixed twin: ``backward`` returns ``grad_output * (input > 0)``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "custom ReLU Function's backward returns relu(input) instead of grad_output*(input>0): units die",
    "source": "PyTorch tutorial MyReLU (examples_autograd/two_layer_net_custom_function.py); https://gist.github.com/Hanrui-Wang/bf225dc0ccb91cdce160539c0acc853a",
    "arch": "MLP classifier (20 -> 64 -> 64 -> 4) with a custom ReLU module",
    "kind": ["dead_activation", "exploding_gradient", "vanishing_gradient"],
    "layer": ["act1", "act2", "fc1", "fc2"],
    "step": [0, 40],
}


class _BadReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return x.clamp(min=0)


class _GoodReLU(_BadReLU):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (x > 0).to(grad_output.dtype)


class CustomReLU(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fn = _GoodReLU if fixed else _BadReLU

    def forward(self, x):
        return self.fn.apply(x)


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fc1 = nn.Linear(20, 64)
        self.act1 = CustomReLU(fixed)
        self.fc2 = nn.Linear(64, 64)
        self.act2 = CustomReLU(fixed)
        self.out = nn.Linear(64, 4)

    def forward(self, x):
        return self.out(self.act2(self.fc2(self.act1(self.fc1(x)))))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    centers = torch.randn(4, 20, generator=g)
    model = Net(fixed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("act1", "act2")) if probe else None
    for _ in range(200):
        y = torch.randint(0, 4, (64,), generator=g)
        x = centers[y] + 0.7 * torch.randn(64, 20, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    zb = mean([r["act"]["act1"]["zero"] for r in bug[-20:]])
    zt = mean([r["act"]["act1"]["zero"] for r in twin[-20:]])
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = zb > 0.95 and zt < 0.8 and lb > 3 * lt
    return held, f"act1 zero fraction (last 20) bug {zb:.3g} twin {zt:.3g}; last-30 loss bug {lb:.3g} twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
