"""A CNN regressor whose optimizer got the momentum as its learning rate: ``SGD(params, 0.9)``.

Bug: the author meant ``SGD(params, lr=0.01, momentum=0.9)`` and wrote the momentum positionally;
torch.optim.SGD's second positional argument is ``lr``, so the rate is 0.9 with no momentum and the
CNN diverges within a few steps.
Source: Humbatova et al., "Taxonomy of Real Faults in Deep Learning Systems" (ICSE 2020),
Training > Hyperparameters > "Suboptimal learning rate"; torch.optim.SGD's signature
(https://pytorch.org/docs/stable/generated/torch.optim.SGD.html: ``SGD(params, lr, momentum=0, ...)``).
Fixed twin: ``SGD(params, lr=0.01, momentum=0.9)``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, ratio, series  # noqa: E402

CASE = {
    "bug": "SGD(params, 0.9): the momentum passed positionally becomes the learning rate",
    "source": "Humbatova et al. ICSE 2020, Training/Hyperparameters 'Suboptimal learning rate'; torch.optim.SGD signature",
    "arch": "CNN regressor (Conv2d, no normalisation)",
    "kind": ["exploding_gradient", "nonfinite", "loss_spike", "activation_explosion"],
    "layer": ["<optimizer>"],
    "step": [0, 15],
}


def data(n=64):
    g = torch.Generator().manual_seed(1)
    while True:
        x = torch.randn(n, 1, 8, 8, generator=g)
        y = 16 * x.mean((1, 2, 3)).unsqueeze(1) + 4 * x[:, 0, :4, :4].mean((1, 2)).unsqueeze(1)
        yield x, y


def make():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(128, 1))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    model = make()
    if fixed:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        opt = torch.optim.SGD(model.parameters(), 0.9)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("1", "3")) if probe else None
    it = data()
    for _ in range(150):
        x, y = next(it)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss, lr=opt.param_groups[0]["lr"])
        opt.step()


def truth(bug, twin):
    lr = ratio(bug[0]["lr"], twin[0]["lr"])
    b_loss, t_loss = mean([r["loss"] for r in bug[-30:]]), mean([r["loss"] for r in twin[-30:]])
    w_b = mean(series(bug[5:15], "weight", "6")) / mean(series(twin[5:15], "weight", "6"))
    held = lr == 90 and (b_loss != b_loss or b_loss > 2 * t_loss) and w_b > 3
    return held, f"lr x{lr:.0f}; last-30 loss bug {b_loss:.3g} vs twin {t_loss:.3g}; head weight norm steps 5-15 bug/twin {w_b:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
