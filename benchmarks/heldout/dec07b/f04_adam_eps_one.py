"""A GRU sequence classifier trained with Adam(eps=1.0): the update is ~lr * grad, a near-frozen model.

Bug: ``eps=1.0`` (TensorFlow's Adam docs mention "1.0 or 0.1" as a good epsilon for Inception on
ImageNet; copied into a small model whose gradients are ~1e-2). Adam's denominator becomes ~1 and
the step ~lr * grad ~1e-5: the loss barely moves.
Source: tf.keras.optimizers.Adam docs ("The default value of 1e-7 for epsilon might not be a good
default in general. For example, when training an Inception network on ImageNet a current good
choice is 1.0 or 0.1", https://www.tensorflow.org/api_docs/python/tf/keras/optimizers/Adam);
Humbatova et al. ICSE 2020, 'Suboptimal hyperparameters' (optimiser).
Fixed twin: Adam's default eps=1e-8.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "Adam eps=1.0 (an Inception/ImageNet value): updates ~lr*grad, the model hardly moves",
    "source": "https://www.tensorflow.org/api_docs/python/tf/keras/optimizers/Adam; Humbatova et al. ICSE 2020",
    "arch": "GRU sequence classifier (embedding + GRU + linear)",
    "kind": ["frozen_weights", "loss_plateau", "vanishing_gradient"],
    "layer": ["<optimizer>", "<loss>"],
    "step": [0, 60],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 16)
        self.gru = nn.GRU(16, 32, batch_first=True)
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        return self.head(self.gru(self.emb(x))[1][-1])


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, eps=1e-8 if fixed else 1.0)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randint(0, 20, (64, 12), generator=g)
        y = ((x < 5).sum(1) > 2).long()
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def _moved(rows, name):
    return abs(rows[-1]["weight"][name] - rows[0]["weight"][name]) / rows[0]["weight"][name]


def truth(bug, twin):
    mb, mt = _moved(bug, "head"), _moved(twin, "head")
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = mt > 30 * mb and lb > 2 * lt
    return held, f"head relative weight-norm change bug {mb:.2g} twin {mt:.2g}; last-30 loss bug {lb:.3g} twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
