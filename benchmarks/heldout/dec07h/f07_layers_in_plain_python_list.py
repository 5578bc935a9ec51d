"""An MLP whose hidden layers sit in a plain Python list: unregistered, never given to the optimizer.

Bug: ``self.layers = [nn.Linear(...) for _ in range(3)]`` instead of ``nn.ModuleList``. The
layers still run in forward (and pass gradients through), but ``model.parameters()`` does not
hold them: the optimizer never updates them and only the registered head learns, on random
features. The task (a product of input features) needs the hidden layers.
Source: https://theflyingbirds.in/blog/pytorch-mysteries-lets-understand-nnmodule-nnparameter-modulelist-sequential-and-the-classic-layers-linear-activations-dropout
("my model didn't know it had parameters"); https://runebook.dev/ru/docs/pytorch/generated/torch.nn.modulelist/torch.nn.ModuleList.append
(a plain list's layers are not updated).
Fixed twin: ``nn.ModuleList``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "hidden layers kept in a plain Python list: not registered, never optimised; only the head learns on random features",
    "source": "https://theflyingbirds.in/blog/pytorch-mysteries-lets-understand-nnmodule-nnparameter-modulelist-sequential-and-the-classic-layers-linear-activations-dropout",
    "arch": "MLP (3 hidden Linear+ReLU, linear head), regression of a feature product",
    "kind": ["loss_plateau", "frozen_weights"],
    "layer": ["<loss>", "<optimizer>", "head"],
    "step": [0, 150],
}


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        layers = [nn.Linear(16 if i == 0 else 64, 64) for i in range(3)]
        self.layers = nn.ModuleList(layers) if fixed else layers
        self.head = nn.Linear(64, 1)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(250):
        x = torch.randn(128, 16, generator=g)
        y = (x[:, 0] * x[:, 1] + x[:, 2] * x[:, 3]).unsqueeze(1)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss, hidden0=float(model.layers[0].weight.detach().norm()))
        opt.step()


def truth(bug, twin):
    moved = abs(bug[-1]["hidden0"] - bug[0]["hidden0"])
    lb, lt = mean([r["loss"] for r in bug[-20:]]), mean([r["loss"] for r in twin[-20:]])
    held = moved == 0 and lb > 3 * lt
    return held, f"bug hidden layer 0 weight norm change {moved:.3g}; last-20 loss bug {lb:.3g} twin {lt:.3g} (target variance 2)"


if __name__ == "__main__":
    sys.exit(main(globals()))
