"""Gaussian-noise augmentation written for 0-255 pixels, applied after the images were scaled to [0, 1].

Bug: ``AddGaussianNoise(std=25.)`` (a std meant for 0-255 pixel units) runs after ``ToTensor()``
has scaled the images to [0, 1]: the noise is ~100x the signal, the classifier's inputs are noise
and it learns almost nothing (clean held-out accuracy near chance). Silent: nothing explodes,
the loss sits near ln K.
Source: PyTorch forum "How to add noise to MNIST dataset when using pytorch"
(https://discuss.pytorch.org/t/how-to-add-noise-to-mnist-dataset-when-using-pytorch/59745),
the AddGaussianNoise transform placed after ToTensor; Humbatova et al. ICSE 2020, "Training data >
preprocessing".
Fixed twin: ``std = 25 / 255``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "noise augmentation with std 25 (0-255 units) added to images already scaled to [0,1]: inputs are noise",
    "source": "https://discuss.pytorch.org/t/how-to-add-noise-to-mnist-dataset-when-using-pytorch/59745",
    "arch": "small CNN on 14x14 images in [0, 1]",
    "kind": ["loss_plateau", "data_anomaly"],
    "layer": ["<loss>", "<input>"],
    "step": [0, 40],
}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    proto = torch.rand(4, 1, 14, 14, generator=g)
    std = 25.0 / 255 if fixed else 25.0
    yv = torch.randint(0, 4, (400,), generator=g)
    xv = (proto[yv] + 0.1 * torch.randn(400, 1, 14, 14, generator=g)).clamp(0, 1)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(64, 4))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(180):
        y = torch.randint(0, 4, (64,), generator=g)
        x = (proto[y] + 0.1 * torch.randn(64, 1, 14, 14, generator=g)).clamp(0, 1)
        x = x + std * torch.randn(x.shape, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            with torch.no_grad():
                acc = float((model(xv).argmax(1) == yv).float().mean())
            p.step(loss, acc=acc)
        opt.step()


def truth(bug, twin):
    ab = sum(r["acc"] for r in bug[-10:]) / 10
    at = sum(r["acc"] for r in twin[-10:]) / 10
    lb = sum(r["loss"] for r in bug[-20:]) / 20
    held = at > 0.9 and ab < 0.5 and lb > 1.0
    return held, f"clean held-out acc last 10: bug {ab:.3f}, twin {at:.3f}; bug train loss last 20 {lb:.3g} (ln 4 = 1.386)"


if __name__ == "__main__":
    sys.exit(main(globals()))
