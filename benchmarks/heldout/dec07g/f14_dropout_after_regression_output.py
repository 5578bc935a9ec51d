"""nn.Dropout(0.5) placed after the last Linear of a regression network.

In training mode half the predictions are zeroed and the other half doubled at every step, so the
MSE can never fall below the variance that dropout itself injects (~ the targets' second moment):
the loss sits far above the fixed twin's (dropout before the last layer, where it belongs).
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, series  # noqa: E402

CASE = {
    "kind": ["loss_plateau", "dead_activation"],
    "layer": ["drop", "<loss>", "head"],
    "step": (0, 60),
    "bug": "Sequential(..., Linear(64, 1), Dropout(0.5)): the dropout zeroes half the predictions",
    "source": "PyTorch forum / StackOverflow 'dropout on the output layer of a regression network' "
              "('should dropout be applied to the last layer?'); Humbatova et al. ICSE 2020 "
              "'Wrong placement of dropout layer'",
    "arch": "MLP regression (house-price style, targets ~N(3, 1))",
}


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed
        self.fc1, self.act1 = nn.Linear(12, 64), nn.ReLU()
        self.fc2, self.act2 = nn.Linear(64, 64), nn.ReLU()
        self.head = nn.Linear(64, 1)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        h = self.act2(self.fc2(self.act1(self.fc1(x))))
        if self.fixed:
            return self.head(self.drop(h))
        return self.drop(self.head(h))


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(12, generator=torch.Generator().manual_seed(16)) / 3
    model = Net(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.MSELoss()
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("drop",)) if probe else None
    for _ in range(200):
        x = torch.randn(64, 12, generator=g)
        y = (3 + x @ w + 0.3 * torch.tanh(x[:, 0] * x[:, 1]))[:, None]
        loss = crit(model(x), y)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    zb = mean(series(bug, "act", "drop", "zero"))
    held = lb > 10 * lt and lb > 1.0 and 0.4 < zb < 0.6
    return held, f"MSE last-30 bug {lb:.3g} vs twin {lt:.3g}; bug output zero fraction {zb:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
