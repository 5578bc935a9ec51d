"""Healthy: a keyword-spotting CNN on log-mel-like spectrograms with SpecAugment (two frequency
masks and two time masks per example, filled with 0 = the normalised mean).

What looks wrong: every input has large rectangular blocks of exactly 0 (~40 % of the
time-frequency cells on average), in different places every step, and the first layer's inputs look
"dead" there; the training loss stays noisier and higher than without augmentation.
Source: Park et al. Interspeech 2019 "SpecAugment" sec. 2; torchaudio.transforms.FrequencyMasking
and TimeMasking.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {"healthy": True, "what": "SpecAugment: large exact-zero blocks in every input, noisier loss",
        "source": "Park et al. Interspeech 2019 (SpecAugment) sec. 2; torchaudio FrequencyMasking/TimeMasking",
        "arch": "2-D CNN keyword spotter (Conv2d x2 + global pool + linear), 6 keywords, 32 mels x 40 frames"}

M, T, K = 32, 40, 6


def spec_augment(x, g):
    n = x.size(0)
    for _ in range(2):
        f = torch.randint(0, 9, (n,), generator=g)
        f0 = (torch.rand(n, generator=g) * (M - f)).long()
        t = torch.randint(0, 11, (n,), generator=g)
        t0 = (torch.rand(n, generator=g) * (T - t)).long()
        mi, ti = torch.arange(M), torch.arange(T)
        fmask = (mi[None] >= f0[:, None]) & (mi[None] < (f0 + f)[:, None])
        tmask = (ti[None] >= t0[:, None]) & (ti[None] < (t0 + t)[:, None])
        x = x.masked_fill(fmask[:, None, :, None] | tmask[:, None, None, :], 0.0)
    return x


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    templates = torch.randn(K, M, T, generator=g).cumsum(2) / 4  # smooth keyword "spectra"
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, K))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        y = torch.randint(0, K, (64,), generator=g)
        shift = int(torch.randint(-4, 5, (1,), generator=g))
        x = torch.roll(templates[y], shift, 2)[:, None] + 0.5 * torch.randn(64, 1, M, T, generator=g)
        x = (x - x.mean()) / x.std()
        x = spec_augment(x, g)
        opt.zero_grad()
        out = model(x)
        loss = crit(out, y)
        loss.backward()
        if p:
            p.step(loss, acc=float((out.argmax(1) == y).float().mean()), zeros=float((x == 0).float().mean()))
        opt.step()


def truth(bug, twin):
    ok, msg = loss_fell(bug, 0.4)
    acc = mean([r["acc"] for r in bug[-20:]])
    z = mean([r["zeros"] for r in bug])
    return ok and acc > 0.85 and z > 0.15, f"{msg}; last-20 accuracy {acc:.3f}; mean fraction of exactly-zero input cells {z:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
