"""A binary classifier whose single output unit goes through Softmax(dim=1): the output is always 1.0.

Bug: the output layer has one unit and the activation is ``nn.Softmax(dim=1)`` (meant: Sigmoid).
A softmax over one element is exactly 1 whatever its input, so BCELoss sees p = 1 for every
sample (the loss sits at ~50: log clamped at -100 for the negatives) and the softmax's Jacobian is
0: no gradient reaches any layer, ever.
Source: "Softmax Always Returns 1" discussion (softmax applied to a single logit, copy in the
huggingface.co/datasets/nvidia/Nemotron-CC-Math-v1 corpus);
https://stats.stackexchange.com/questions/207049 (one output node: sigmoid, not softmax);
Humbatova et al. ICSE 2020, 'Wrong type of activation function' (last layer).
Fixed twin: ``nn.Sigmoid()``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "nn.Softmax(dim=1) on a single output unit before BCELoss: output always 1.0, zero gradient",
    "source": "https://stats.stackexchange.com/questions/207049; 'Softmax Always Returns 1' (nvidia/Nemotron-CC-Math-v1); Humbatova et al. ICSE 2020",
    "arch": "MLP binary classifier (10 -> 32 -> 32 -> 1) + output activation, BCELoss",
    "kind": ["no_gradient", "vanishing_gradient", "saturated_activation", "loss_plateau", "frozen_weights"],
    "layer": ["out_act", "out", "<loss>"],
    "step": [0, 2],
}


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fc1 = nn.Linear(10, 32)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(32, 32)
        self.act2 = nn.ReLU()
        self.out = nn.Linear(32, 1)
        self.out_act = nn.Sigmoid() if fixed else nn.Softmax(dim=1)

    def forward(self, x):
        return self.out_act(self.out(self.act2(self.fc2(self.act1(self.fc1(x))))))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    w = torch.randn(10, generator=g)
    model = Net(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.BCELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        x = torch.randn(64, 10, generator=g)
        y = ((x @ w) > 0).float().unsqueeze(1)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    gb = max(r["grad"]["fc1"] or 0.0 for r in bug)
    gt = mean([r["grad"]["fc1"] for r in twin])
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = gb == 0.0 and gt > 1e-3 and lb > 10 and lt < 0.3
    return held, f"fc1 grad norm max bug {gb:.3g}, twin mean {gt:.3g}; last-30 loss bug {lb:.3g} twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
