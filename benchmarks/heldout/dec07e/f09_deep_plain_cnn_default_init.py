"""A 14-layer plain ReLU CNN (no BatchNorm, no shortcuts) left at PyTorch's default Conv2d init.

Bug: the default init (kaiming_uniform with a = sqrt(5)) gives each weight variance 1 / (3 fan_in):
with ReLU halving the second moment, each layer shrinks the signal's second moment ~6x, forward and
backward. After 14 layers the gradient reaching the first convolutions is many orders of magnitude
below the last ones', the features are set by the biases alone, and the net does not train.
Source: He, Zhang, Ren & Sun, "Delving Deep into Rectifiers", ICCV 2015, sec. 2.2 and fig. 3 (a
30-layer plain ReLU net with a variance-shrinking init stalls; with the ReLU-aware init it trains);
https://github.com/pytorch/pytorch/issues/18182 (the default init's a = sqrt(5) gain and its effect
on deep nets).
Fixed twin: ``kaiming_normal_(w, nonlinearity="relu")`` and zero biases (He init).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "14-layer plain ReLU CNN at default init (weight variance 1/(3 fan_in)): signal and gradient shrink ~6x a layer",
    "source": "He et al. ICCV 2015 sec. 2.2, fig. 3; https://github.com/pytorch/pytorch/issues/18182",
    "arch": "14 x (Conv2d 3x3, 16 channels + ReLU), linear head (4 classes, 8x8 images)",
    "kind": ["vanishing_gradient", "activation_collapse"],
    "layer": ["convs.*"],
    "step": [0, 5],
}

DEPTH = 14


class PlainNet(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        layers = []
        for i in range(DEPTH):
            conv = nn.Conv2d(1 if i == 0 else 16, 16, 3, padding=1)
            if fixed:
                nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")
                nn.init.zeros_(conv.bias)
            layers += [conv, nn.ReLU()]
        self.convs = nn.Sequential(*layers)
        self.fc = nn.Linear(16 * 8 * 8, 4)

    def forward(self, x):
        return self.fc(self.convs(x).flatten(1))


def batch(g, n=32):
    y = torch.randint(0, 4, (n,), generator=g)
    x = 0.3 * torch.randn(n, 1, 8, 8, generator=g)
    for i in range(n):
        r, c = divmod(int(y[i]), 2)
        x[i, 0, r * 4:r * 4 + 4, c * 4:c * 4 + 4] += 1.0
    return x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = PlainNet(fixed)
    opt = torch.optim.SGD(model.parameters(), lr=0.003, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x, y = batch(g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    first, last = "convs.0", f"convs.{2 * (DEPTH - 1)}"
    rb = mean([r["grad"][first] / max(r["grad"][last], 1e-30) for r in bug[:10]])
    rt = mean([r["grad"][first] / max(r["grad"][last], 1e-30) for r in twin[:10]])
    lb = mean([r["loss"] for r in bug[-20:]])
    lt = mean([r["loss"] for r in twin[-20:]])
    held = rb < 1e-4 and rt > 1e-2 and lb > 1.3 and lt < 0.5
    return held, (f"first-10 grad norm ratio convs.0 / last conv bug {rb:.3g} twin {rt:.3g}; last-20 loss "
                  f"bug {lb:.3g} twin {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
