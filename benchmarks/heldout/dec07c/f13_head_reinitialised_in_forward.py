"""A small ViT-like patch classifier whose head is re-initialised inside forward(): it never learns.

Bug: the weight init of the classification head was put in ``forward`` instead of ``__init__``
(``nn.init.xavier_uniform_(self.head.weight)`` on every call): each step the head is random
again, the optimizer's update to it is thrown away, and the patch embedding is trained against a
new random readout each step. The loss stays near ln 4.
Source: https://thecodeforge.io/ml-ai/pytorch-neural-network/ ("Defining layers inside forward()
creates new untrained weights every pass — the optimizer updates weights that are immediately
discarded"; here the same failure through an init call in forward); Humbatova et al. ICSE 2020,
'Wrong weights initialisation'.
Fixed twin: the init done once in ``__init__``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "nn.init.xavier_uniform_ on the head inside forward(): the head is re-randomised every step",
    "source": "https://thecodeforge.io/ml-ai/pytorch-neural-network/; Humbatova et al. ICSE 2020 'Wrong weights initialisation'",
    "arch": "ViT-like: Conv2d patch embedding + one TransformerEncoderLayer + mean pool + linear head",
    "kind": ["loss_plateau", "loss_spike"],
    "layer": ["head", "<loss>"],
    "step": [0, 150],
}


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed
        self.patch = nn.Conv2d(1, 32, 4, stride=4)
        self.pos = nn.Parameter(torch.zeros(1, 16, 32))
        self.block = nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(32, 4)
        if fixed:
            nn.init.xavier_uniform_(self.head.weight)

    def forward(self, x):
        if not self.fixed:
            nn.init.xavier_uniform_(self.head.weight)
        t = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        return self.head(self.block(t).mean(1))


def batch(g, n=32):
    y = torch.randint(0, 4, (n,), generator=g)
    x = torch.randn(n, 1, 16, 16, generator=g) * 0.3
    for i in range(n):  # class k: a bright bar, horizontal/vertical, top/left or bottom/right
        k = int(y[i])
        pos = 2 if k < 2 else 12
        if k % 2 == 0:
            x[i, 0, pos:pos + 2, :] += 1.0
        else:
            x[i, 0, :, pos:pos + 2] += 1.0
    return x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        x, y = batch(g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = lb > 1.0 and lb > 5 * lt
    return held, f"last-30 loss bug {lb:.3g} twin {lt:.3g} (ln 4 = 1.39)"


if __name__ == "__main__":
    sys.exit(main(globals()))
