"""Healthy: a bag-of-words classifier on 2000-wide multi-hot inputs, ~1 % of entries non-zero.

Each document is a multi-hot vector over a 2000-word vocabulary with ~20 words present: 99 % of
every input is exactly 0, and each step most input columns of the first Linear get no gradient.
The label depends on a few sentiment words; the model learns it.
Source: scikit-learn / Keras text tutorials (multi-hot bag-of-words into a dense layer); Joulin et
al., "Bag of Tricks for Efficient Text Classification", EACL 2017, sec. 2.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {
    "healthy": True,
    "bug": "multi-hot bag-of-words input, 2000 wide, 99% zeros: most input columns idle each step",
    "source": "Joulin et al. EACL 2017 sec. 2; Keras/sklearn multi-hot text tutorials",
    "arch": "MLP on multi-hot bag of words (2000 -> 64 -> 2, ReLU)",
}

V = 2000


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(V, 64)
        self.act = nn.ReLU()
        self.out = nn.Linear(64, 2)

    def forward(self, x):
        return self.out(self.act(self.fc1(x)))


def batch(g, n=64):
    x = torch.zeros(n, V)
    idx = torch.cat([torch.randint(0, 80, (n, 5), generator=g),  # sentiment words are frequent
                     torch.randint(80, V, (n, 15), generator=g)], 1)
    x.scatter_(1, idx, 1.0)
    score = x[:, :40].sum(1) - x[:, 40:80].sum(1)  # words 0-39 positive, 40-79 negative
    y = (score + 0.1 * torch.randn(n, generator=g) > 0).long()
    return x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("act",)) if probe else None
    for _ in range(250):
        x, y = batch(g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, detail = loss_fell(bug, 0.5)
    dead = mean([r["act"]["act"]["zero"] for r in bug[-20:]])
    held = fell and dead < 0.9
    return held, f"{detail}; ReLU zero fraction (last 20) {dead:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
