"""WeightedRandomSampler given one weight per CLASS instead of one per SAMPLE: it only draws rows 0..K-1.

Bug: ``WeightedRandomSampler(class_weights, num_samples=N)`` with ``len(class_weights) == K``
samples indices 0..K-1 only, so the classifier sees 4 training rows for the whole run: the training
loss falls to ~0 while the held-out loss stays at or above ln K (it memorises 4 points). Silent: every
statistic is healthy; it learns far less than the twin (measured on a held-out set with the probe).
Source: PyTorch forum "How to handle imbalanced classes" (https://discuss.pytorch.org/t/how-to-handle-imbalanced-classes/11264),
where the sampler's weights must be per sample (``class_weights[targets]``), a recurring mistake there.
Fixed twin: ``weights = class_weights[targets]``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "WeightedRandomSampler given per-class weights: only rows 0..K-1 are ever drawn, held-out loss stays ~ln K",
    "source": "https://discuss.pytorch.org/t/how-to-handle-imbalanced-classes/11264",
    "arch": "MLP classifier on imbalanced tabular data (DataLoader + WeightedRandomSampler)",
    "kind": ["data_anomaly", "loss_plateau", "activation_collapse"],
    "layer": ["<input>", "<loss>"],
    "step": [0, 40],
}


def _data(g, n):
    centers = torch.randn(4, 20, generator=g) * 1.5
    y = torch.multinomial(torch.tensor([0.55, 0.25, 0.12, 0.08]), n, replacement=True, generator=g)
    return centers[y] + torch.randn(n, 20, generator=g), y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x, y = _data(g, 2000)
    xv, yv = x[-500:], y[-500:]
    x, y = x[:1500], y[:1500]
    counts = torch.bincount(y, minlength=4).float()
    class_w = 1.0 / counts
    weights = class_w[y] if fixed else class_w
    sampler = torch.utils.data.WeightedRandomSampler(weights, num_samples=64 * 150, replacement=True,
                                                     generator=torch.Generator().manual_seed(2))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64, sampler=sampler)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for xb, yb in loader:
        opt.zero_grad()
        loss = crit(model(xb), yb)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            with torch.no_grad():
                val = crit(model(xv), yv)
            p.step(loss, val=float(val))
        opt.step()


def truth(bug, twin):
    vb, vt = bug[-1]["val"], twin[-1]["val"]
    held = vb > 0.8 and vt < 0.3 * vb
    return held, f"held-out loss at the end: bug {vb:.3g}, twin {vt:.3g}; bug train loss {bug[-1]['loss']:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
