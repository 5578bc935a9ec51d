"""A CNN fed channels-last images reshaped with ``.view(B, C, H, W)`` instead of permuted.

Bug: images arrive as (B, H, W, C) (numpy/PIL layout) and are turned into (B, C, H, W) with
``x.view(B, 3, H, W)``: the memory is reinterpreted, so pixels and channels are scrambled
(each "channel" plane holds a band of rows with the colours interleaved along the width). The
task, which colour the object is, becomes nearly unlearnable for a small CNN.
Source: https://openillumi.com/?p=83529 ("the real reason view() won't work" for (H, W, 3) <-> (3, H, W));
http://luxuff.cn/archives/reshape%E6%93%8D%E4%BD%9C%E5%AF%B9nchw%E6%A0%BC%E5%BC%8F%E7%9A%84%E5%9B%BE%E7%89%87%E6%95%B0%E6%8D%AE%E7%9A%84%E5%BD%B1%E5%93%8D
(reshape instead of transpose scrambles the image); Humbatova et al. ICSE 2020 (wrong tensor shape).
Fixed twin: ``x.permute(0, 3, 1, 2)``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "channels-last images reshaped with view(B, C, H, W) instead of permute: pixels and colours scrambled",
    "source": "https://openillumi.com/?p=83529; Humbatova et al. ICSE 2020 'Wrong tensor shape'",
    "arch": "small CNN colour classifier (Conv2d x2, global pooling, linear)",
    "kind": ["loss_plateau", "data_anomaly"],
    "layer": ["<loss>", "<input>"],
    "step": [0, 150],
}

S = 16


def batch(g, n=64):
    """A coloured square on a grey noisy background; the class is its colour (6 hues)."""
    y = torch.randint(0, 6, (n,), generator=g)
    hues = torch.tensor([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [0, 1, 1], [1, 0, 1]], dtype=torch.float)
    img = 0.5 + 0.1 * torch.randn(n, S, S, 3, generator=g)
    for i in range(n):
        r, c = torch.randint(0, S - 5, (2,), generator=g).tolist()
        img[i, r:r + 5, c:c + 5, :] = hues[y[i]]
    return img, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(8, 6))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        hwc, y = batch(g)
        x = hwc.permute(0, 3, 1, 2) if fixed else hwc.view(hwc.shape[0], 3, S, S)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lb, lt = mean([r["loss"] for r in bug[-20:]]), mean([r["loss"] for r in twin[-20:]])
    held = lb > 4 * lt
    return held, f"last-20 loss bug {lb:.3g} twin {lt:.3g} (ln 6 = 1.79)"


if __name__ == "__main__":
    sys.exit(main(globals()))
