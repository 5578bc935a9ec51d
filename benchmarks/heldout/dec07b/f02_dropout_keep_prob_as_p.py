"""A 1-D CNN audio classifier ported from TensorFlow: ``keep_prob=0.9`` became ``nn.Dropout(p=0.9)``.

Bug: TensorFlow 1's ``tf.nn.dropout(x, keep_prob)`` takes the probability of *keeping* a unit;
PyTorch's ``nn.Dropout(p)`` takes the probability of *zeroing* it. Ported literally, 90 % of the
hidden features are zeroed every step (the rest scaled x10) and the classifier barely learns.
Source: torch.nn.Dropout docs ("p - probability of an element to be zeroed",
https://pytorch.org/docs/stable/generated/torch.nn.Dropout.html) against tf.nn.dropout's
keep_prob (TF 1.x API, e.g. https://miaokee.com/1212297.html); Humbatova et al. ICSE 2020,
'Wrong value of dropout rate' (Hyperparameters).
Fixed twin: ``nn.Dropout(p=0.1)``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, series  # noqa: E402

CASE = {
    "bug": "nn.Dropout(p=0.9) ported from TF keep_prob=0.9: 90% of the features zeroed",
    "source": "https://pytorch.org/docs/stable/generated/torch.nn.Dropout.html; Humbatova et al. ICSE 2020 (dropout rate)",
    "arch": "1-D CNN over a raw waveform (audio-like), 4 classes",
    "kind": ["dead_activation", "activation_collapse", "loss_plateau"],
    "layer": ["drop", "<loss>"],
    "step": [0, 150],
}


def make(p):
    return nn.Sequential(
        nn.Conv1d(1, 16, 9, stride=2), nn.ReLU(), nn.Conv1d(16, 32, 9, stride=2), nn.ReLU(),
        nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(32, 64), nn.ReLU(),
    ), nn.Dropout(p), nn.Linear(64, 4)


class Net(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.body, self.drop, self.head = make(p)

    def forward(self, x):
        return self.head(self.drop(self.body(x)))


def batch(g, n=64, t=256):
    y = torch.randint(0, 4, (n,), generator=g)
    freq = (y.float() + 1) * 0.05
    phase = torch.rand(n, 1, generator=g) * 6.28
    x = torch.sin(torch.arange(t).float() * freq.unsqueeze(1) * 6.28 + phase) + 0.5 * torch.randn(n, t, generator=g)
    return x.unsqueeze(1), y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net(0.1 if fixed else 0.9)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("drop",)) if probe else None
    for _ in range(200):
        x, y = batch(g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    zb = mean(series(bug, "act", "drop", "zero"))
    zt = mean(series(twin, "act", "drop", "zero"))
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = zb > 0.85 and zt < 0.6 and lb > 2 * lt
    return held, f"drop zero fraction bug {zb:.2f} twin {zt:.2f}; last-30 loss bug {lb:.3g} twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
