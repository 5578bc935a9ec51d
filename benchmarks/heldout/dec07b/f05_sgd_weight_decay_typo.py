"""A small CNN trained with SGD(weight_decay=0.5): a typo for 5e-4 that shrinks every weight each step.

Bug: ``weight_decay=5e-1`` instead of ``5e-4``: with lr 0.1 every weight is multiplied by 0.95 per
step before the gradient step; the weights settle where decay balances the gradient, the logits
stay near zero and the loss stays near ln K.
Source: Humbatova et al. ICSE 2020, 'Wrong value of weight decay/regularisation' (Training /
Hyperparameters); torch.optim.SGD docs (weight_decay = L2 penalty,
https://pytorch.org/docs/stable/generated/torch.optim.SGD.html); Loshchilov & Hutter ICLR 2019
sec. 2 (L2 as decay in SGD).
Fixed twin: ``weight_decay=5e-4``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "SGD weight_decay=0.5 (typo for 5e-4): weights shrink until the logits are ~0",
    "source": "Humbatova et al. ICSE 2020 (regularisation value); https://pytorch.org/docs/stable/generated/torch.optim.SGD.html",
    "arch": "small CNN classifier (Conv2d x2 + linear), 5 classes",
    "kind": ["loss_plateau", "activation_collapse", "vanishing_gradient", "frozen_weights"],
    "layer": ["<optimizer>", "<loss>"],
    "step": [0, 100],
}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                          nn.Linear(64, 5))
    proto = torch.randn(5, 1, 12, 12, generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4 if fixed else 5e-1)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        y = torch.randint(0, 5, (64,), generator=g)
        x = proto[y] + 0.7 * torch.randn(64, 1, 12, 12, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    wb = bug[-1]["weight"]["7"] / bug[0]["weight"]["7"]
    wt = twin[-1]["weight"]["7"] / twin[0]["weight"]["7"]
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = wb < 0.2 * wt and lb > 1.4 and lb > 4 * lt
    return held, f"head weight norm end/start bug {wb:.3g} twin {wt:.3g}; last-30 loss bug {lb:.3g} (ln 5 = 1.609) twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
