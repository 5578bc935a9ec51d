"""A 10-layer MLP with sigmoid hidden activations: the first layers' gradients vanish.

Bug: every hidden activation is ``nn.Sigmoid`` in a 10-layer-deep plain MLP (no normalisation, no
skip). The sigmoid's derivative is at most 1/4, so the gradient reaching the first layers shrinks
by orders of magnitude against the last layers'; with SGD the first layers hardly learn and the
loss stays high.
Source: Glorot & Bengio, AISTATS 2010, sec. 4 (sigmoid deep networks: saturation and vanishing
gradients in the lower layers); Humbatova et al. ICSE 2020, 'Wrong type of activation function'.
Fixed twin: the same network with ReLU hidden activations (same He init).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, ratio  # noqa: E402

CASE = {
    "bug": "10 hidden layers with sigmoid activations (no skip, no norm): lower-layer gradients vanish",
    "source": "Glorot & Bengio AISTATS 2010 sec. 4; Humbatova et al. ICSE 2020 'Wrong type of activation function'",
    "arch": "deep plain MLP (10 hidden Linear layers, width 32), 4 classes",
    "kind": ["vanishing_gradient", "saturated_activation"],
    "layer": ["body.0", "body.1", "body.2", "body.3"],
    "step": [0, 10],
}


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        layers = []
        for i in range(10):
            lin = nn.Linear(16 if i == 0 else 32, 32)
            nn.init.kaiming_normal_(lin.weight, nonlinearity="relu")
            nn.init.zeros_(lin.bias)
            layers += [lin, nn.ReLU() if fixed else nn.Sigmoid()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.body(x))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    centers = torch.randn(4, 16, generator=g) * 2
    model = Net(fixed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        y = torch.randint(0, 4, (64,), generator=g)
        x = centers[y] + torch.randn(64, 16, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def _first_over_last(rows):
    return mean([ratio(r["grad"]["body.0"], r["grad"]["body.18"]) for r in rows[:20]])


def truth(bug, twin):
    rb, rt = _first_over_last(bug), _first_over_last(twin)
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = rt > 100 * rb and lb > 3 * lt
    return held, (f"grad norm body.0/body.18 (first 20 steps) bug {rb:.2g} twin {rt:.2g}; "
                  f"last-30 loss bug {lb:.3g} twin {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
