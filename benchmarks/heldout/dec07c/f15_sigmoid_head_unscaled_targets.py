"""A regressor with a Sigmoid output trained on targets in 0-100 (a percentage never divided by 100).

Bug: the head ends in ``nn.Sigmoid()`` (copied from a model for targets in [0, 1]) while the
targets are percentages, 5 to 95. The MSE keeps pushing the output towards values a sigmoid cannot
reach: its pre-activation grows until the sigmoid sits at 1.0 for every sample, its derivative
is ~0, and the loss stays at ~(y - 1)^2, thousands.
Source: Humbatova et al. ICSE 2020, 'Wrong type of activation function' (last layer) and 'Wrong
preprocessing' (targets not scaled); Bishop PRML sec. 5.2 (output activation matched to the
target's range).
Fixed twin: targets divided by 100 (and predictions multiplied back).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "Sigmoid output head trained with MSE on targets in 5-95 (percentages not /100): sigmoid pinned at 1",
    "source": "Humbatova et al. ICSE 2020 'Wrong type of activation function' (last layer); Bishop PRML sec. 5.2",
    "arch": "MLP regressor (12 -> 64 -> 64 -> 1) with a Sigmoid output",
    "kind": ["saturated_activation", "vanishing_gradient", "loss_plateau"],
    "layer": ["out_act", "out", "<loss>"],
    "step": [0, 60],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 64)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(64, 64)
        self.act2 = nn.ReLU()
        self.out = nn.Linear(64, 1)
        self.out_act = nn.Sigmoid()

    def forward(self, x):
        return self.out_act(self.out(self.act2(self.fc2(self.act1(self.fc1(x))))))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    w = torch.randn(12, 1, generator=g) / 3
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("out_act",)) if probe else None
    for _ in range(200):
        x = torch.randn(64, 12, generator=g)
        pct = 50 + 45 * torch.tanh(x @ w)  # a percentage, 5-95
        y = pct / 100 if fixed else pct
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss, rel=float(((model(x).detach() * (100 if fixed else 1) - pct) ** 2).mean() / pct.var()))
        opt.step()


def truth(bug, twin):
    sb = mean([r["act"]["out_act"]["sat99"] for r in bug[-20:]])
    st = mean([r["act"]["out_act"]["sat99"] for r in twin[-20:]])
    rb = mean([r["rel"] for r in bug[-20:]])
    rt = mean([r["rel"] for r in twin[-20:]])
    held = sb > 0.9 and st < 0.1 and rb > 2 and rt < 0.3
    return held, (f"sigmoid outputs >= 0.99 (last 20) bug {sb:.3g} twin {st:.3g}; "
                  f"MSE / target variance in percent units (last 20) bug {rb:.3g} twin {rt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
