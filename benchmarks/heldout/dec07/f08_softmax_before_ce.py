"""An MLP classifier that ends in nn.Softmax and is trained with nn.CrossEntropyLoss.

Bug: CrossEntropyLoss applies log-softmax itself; fed probabilities, it sees inputs in [0, 1],
the loss cannot go below ~ln(K) - 1 + ..., and the gradients reaching the network shrink as the
softmax saturates: training stalls far above the twin.
Source: Humbatova et al., "Taxonomy of Real Faults in Deep Learning Systems" (ICSE 2020),
Model > Layers > activation function ("redundant softmax"); the CrossEntropyLoss documentation
("The input is expected to contain the unnormalized logits for each class",
https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html).
Fixed twin: no Softmax module (logits go to the loss).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "nn.Softmax as the last layer before CrossEntropyLoss (softmax applied twice)",
    "source": "Humbatova et al. ICSE 2020 (redundant softmax); https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html",
    "arch": "MLP classifier (10 classes)",
    "kind": ["saturated_activation", "vanishing_gradient", "loss_plateau"],
    "layer": ["softmax", "out", "<loss>"],
    "step": [0, 150],
}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential()
    model.add_module("fc1", nn.Linear(30, 128))
    model.add_module("act1", nn.ReLU())
    model.add_module("fc2", nn.Linear(128, 128))
    model.add_module("act2", nn.ReLU())
    model.add_module("out", nn.Linear(128, 10))
    if not fixed:
        model.add_module("softmax", nn.Softmax(dim=1))
    w = torch.randn(30, 10, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(250):
        x = torch.randn(64, 30, generator=g)
        y = (x @ w).argmax(1)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    b, t = mean([r["loss"] for r in bug[-20:]]), mean([r["loss"] for r in twin[-20:]])
    held = b > 1.6 and t < 0.8
    return held, f"last-20 loss bug {b:.3g} (floor of CE on probabilities ~1.46 for K=10) twin {t:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
