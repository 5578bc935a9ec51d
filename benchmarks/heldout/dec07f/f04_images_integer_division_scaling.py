"""A CNN classifier whose uint8 images are scaled with floor division: ``img // 255``.

Bug: integer (floor) division of 0..254 by 255 is 0: every input pixel is 0 except the rare 255s,
so the model sees a constant image and can only learn the class prior (loss stays at ln K).
Source: StackOverflow "Why does dividing an image by 255 give all zeros" (integer division of
uint8 arrays, https://stackoverflow.com/questions/38752229); Humbatova et al. ICSE 2020,
Training data 'wrong preprocessing'.
Fixed twin: ``img.float() / 255``.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "uint8 images scaled with // 255 (floor division): inputs all 0, the model learns only the prior",
    "source": "https://stackoverflow.com/questions/38752229; Humbatova et al. ICSE 2020 (wrong preprocessing)",
    "arch": "small CNN classifier (Conv2d x2 + linear), 4 classes",
    "kind": ["data_anomaly", "loss_plateau"],
    "layer": ["<input>", "<loss>"],
    "step": [0, 100],
}

K = 4


def make_batch(g, n=64):
    y = torch.randint(0, K, (n,), generator=g)
    img = torch.randint(0, 90, (n, 1, 12, 12), generator=g)
    for k in range(K):  # each class brightens one quadrant (values up to 254, never 255)
        r, c = divmod(k, 2)
        sel = y == k
        img[sel, :, r * 6:(r + 1) * 6, c * 6:(c + 1) * 6] += 160
    return img.to(torch.uint8), y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(64, K))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("0",)) if probe else None
    for _ in range(150):
        img, y = make_batch(g)
        x = img.float() / 255 if fixed else (img // 255).float()
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss, input_zero=float((x == 0).float().mean()))
        opt.step()


def truth(bug, twin):
    z = mean([r["input_zero"] for r in bug])
    lb, lt = mean([r["loss"] for r in bug[-30:]]), mean([r["loss"] for r in twin[-30:]])
    held = z > 0.999 and abs(lb - math.log(K)) < 0.05 and lt < 0.2 * lb
    return held, f"bug input zero fraction {z:.4f}; last-30 loss bug {lb:.3g} (ln {K} = {math.log(K):.3f}) twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
