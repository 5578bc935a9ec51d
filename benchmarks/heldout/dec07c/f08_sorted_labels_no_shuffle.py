"""A 1-D CNN signal classifier trained on a dataset sorted by label, without shuffling.

Bug: the samples are stored class by class and the loader is built with ``shuffle=False``: the
first 50 batches are all class 0, the next 50 all class 1, and so on. Inside each block the model
learns "always this class" (the loss falls to ~0), at every block change the loss jumps by orders
of magnitude, and at the end the model predicts the last class for everything.
Source: https://dailydoseofds.beehiiv.com/p/why-is-it-important-to-shuffle-your (a network on
label-ordered data fails to converge); Humbatova et al. ICSE 2020, 'Missing data shuffling';
torch.utils.data.DataLoader docs (shuffle defaults to False).
Fixed twin: the same samples in a shuffled order.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "dataset sorted by class and DataLoader shuffle=False: 50 single-class batches per class in turn",
    "source": "https://dailydoseofds.beehiiv.com/p/why-is-it-important-to-shuffle-your; Humbatova et al. ICSE 2020 'Missing data shuffling'",
    "arch": "1-D CNN signal classifier (Conv1d x2 + global pool + linear), 4 classes",
    "kind": ["loss_spike", "data_anomaly", "loss_plateau"],
    "layer": ["<input>", "<loss>"],
    "step": [0, 60],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(1, 8, 5, padding=2)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv1d(8, 16, 5, padding=2)
        self.act2 = nn.ReLU()
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.act2(self.conv2(self.act1(self.conv1(x)))).mean(-1))


def dataset(g, n_per_class=800):
    t = torch.linspace(0, 1, 64)
    xs, ys = [], []
    for k in range(4):  # class k: a sine of frequency 2 + 3k, random phase, noise
        phase = torch.rand(n_per_class, 1, generator=g) * 6.28
        x = torch.sin(6.28 * (2 + 3 * k) * t + phase) + 0.3 * torch.randn(n_per_class, 64, generator=g)
        xs.append(x)
        ys.append(torch.full((n_per_class,), k))
    return torch.cat(xs).unsqueeze(1), torch.cat(ys)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x_all, y_all = dataset(g)
    if fixed:
        perm = torch.randperm(len(y_all), generator=g)
        x_all, y_all = x_all[perm], y_all[perm]
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for i in range(200):
        x, y = x_all[i * 16:(i + 1) * 16], y_all[i * 16:(i + 1) * 16]
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss, acc=_balanced_acc(model, x_all, y_all) if i == 199 else None)
        opt.step()


def _balanced_acc(model, x_all, y_all):
    with torch.no_grad():
        pred = model(x_all[::8]).argmax(1)
    return float((pred == y_all[::8]).float().mean())


def truth(bug, twin):
    jump = bug[50]["loss"] / max(bug[49]["loss"], 1e-12)
    ab, at = bug[-1]["acc"], twin[-1]["acc"]
    held = jump > 10 and ab < 0.4 and at > 0.8
    return held, f"bug loss step 49 -> 50 x{jump:.3g}; final accuracy on all classes bug {ab:.3g} twin {at:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
