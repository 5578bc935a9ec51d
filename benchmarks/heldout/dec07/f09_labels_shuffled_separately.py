"""A 1-D CNN trained on a dataset whose inputs and labels were shuffled with separate permutations.

Bug: ``X = X[torch.randperm(n)]; y = y[torch.randperm(n)]`` (two independent shuffles, as with two
calls to ``np.random.shuffle``): the labels no longer belong to their inputs, the loss sits at ln K
(the network can only learn the class prior) while the twin learns.
Source: Humbatova et al., "Taxonomy of Real Faults in Deep Learning Systems" (ICSE 2020),
Training > Training data quality > "Wrong labels for training data"; Stack Overflow "Shuffling
two numpy arrays in unison" (https://stackoverflow.com/questions/4601373).
Fixed twin: one permutation indexes both.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "inputs and labels shuffled with two independent permutations",
    "source": "Humbatova et al. ICSE 2020 'Wrong labels for training data'; https://stackoverflow.com/questions/4601373",
    "arch": "1-D CNN over a signal",
    "kind": ["loss_plateau"],
    "layer": ["<loss>", "<input>"],
    "step": [0, 150],
}


def dataset(g, n=2048, t=64):
    x = torch.randn(n, 1, t, generator=g)
    freq = torch.randint(0, 4, (n,), generator=g)
    grid = torch.arange(t).float()
    x = x * 0.5 + torch.sin(grid.unsqueeze(0) * (freq.unsqueeze(1) + 1) * 0.4).unsqueeze(1)
    return x, freq


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x, y = dataset(g)
    if fixed:
        perm = torch.randperm(len(y), generator=g)
        x, y = x[perm], y[perm]
    else:
        x = x[torch.randperm(len(y), generator=g)]
        y = y[torch.randperm(len(y), generator=g)]
    model = nn.Sequential(
        nn.Conv1d(1, 16, 7, padding=3), nn.ReLU(), nn.Conv1d(16, 16, 7, padding=3), nn.ReLU(),
        nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(16, 4))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for step in range(200):
        i = (step * 32) % len(y)
        xb, yb = x[i:i + 32], y[i:i + 32]
        opt.zero_grad()
        loss = crit(model(xb), yb)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    b, t = mean([r["loss"] for r in bug[-40:]]), mean([r["loss"] for r in twin[-40:]])
    held = b > 1.3 and t < 0.7
    return held, f"last-40 loss bug {b:.3g} (ln 4 = 1.386) twin {t:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
