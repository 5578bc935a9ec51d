"""Classifier whose output layer is initialised with ``normal_(std=10)`` (a loop that re-inits every Linear).

Bug: an init loop ``for m in model.modules(): if isinstance(m, nn.Linear): nn.init.normal_(m.weight, std=10)``
(meant for a different scale) also hits the output layer: the initial logits are ~1e2, the softmax
is saturated, the initial loss is ~50x ln K instead of ln K, and with plain SGD the run spends its
budget undoing the init: it ends far above the twin. Loud at step 0 (initial loss), then slow.
Source: A. Karpathy, "A Recipe for Training Neural Networks" (2019), "verify loss @ init" and
"init well" (http://karpathy.github.io/2019/04/25/recipe/); CS231n notes on weight init.
Fixed twin: the default init (kaiming-uniform) for every layer.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "every Linear (output included) initialised N(0, 10^2): initial loss ~50x ln K, saturated softmax",
    "source": "http://karpathy.github.io/2019/04/25/recipe/ (verify loss @ init, init well)",
    "arch": "3-layer tanh MLP classifier (10 classes)",
    "kind": ["initial_loss", "saturated_activation", "exploding_gradient", "activation_explosion"],
    "layer": ["<loss>", "fc3", "fc1", "fc2", "act1", "act2"],
    "step": [0, 5],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act1 = nn.Linear(20, 64), nn.Tanh()
        self.fc2, self.act2 = nn.Linear(64, 64), nn.Tanh()
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc3(self.act2(self.fc2(self.act1(self.fc1(x)))))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    centers = torch.randn(10, 20, generator=g)
    model = Net()
    if not fixed:
        for m in model.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=10.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("act1", "act2")) if probe else None
    for _ in range(200):
        y = torch.randint(0, 10, (64,), generator=g)
        x = centers[y] + 0.5 * torch.randn(64, 20, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    b0, t0 = bug[0]["loss"], twin[0]["loss"]
    lb = sum(r["loss"] for r in bug[-20:]) / 20
    lt = sum(r["loss"] for r in twin[-20:]) / 20
    sat = bug[0]["act"]["act2"]["sat99"]
    held = b0 > 10 * t0 and lb > 5 * lt and sat > 0.5
    return held, f"initial loss bug {b0:.3g}, twin {t0:.3g} (ln 10 = 2.30); last 20 bug {lb:.3g}, twin {lt:.3g}; act2 |x|>=0.99 at step 0: {sat:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
