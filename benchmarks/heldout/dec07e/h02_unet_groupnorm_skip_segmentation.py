"""Healthy: a two-level U-Net with GroupNorm, skip concatenations and a transposed-conv decoder.

Binary segmentation of a bright cross (two 2-pixel lines, ~25 % of the pixels) in noise: the decoder
concatenates the encoder's features (skip connections) and GroupNorm normalises every conv
(batch-size independent). It trains: Dice above 0.8.
Source: Ronneberger, Fischer & Brox, "U-Net", MICCAI 2015, sec. 2; Wu & He, "Group Normalization",
ECCV 2018.
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {
    "healthy": True,
    "bug": "U-Net with GroupNorm and skip concatenations, binary segmentation of line crosses",
    "source": "Ronneberger et al. MICCAI 2015 sec. 2; Wu & He ECCV 2018",
    "arch": "2-level U-Net (1x16x16 -> 1x16x16 logits), GroupNorm(4), ConvTranspose2d decoder",
}


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(4, cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.GroupNorm(4, cout), nn.ReLU())


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.down1 = block(1, 8)
        self.down2 = block(8, 16)
        self.bottom = block(16, 32)
        self.up2 = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.dec2 = block(32, 16)
        self.up1 = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.dec1 = block(16, 8)
        self.out = nn.Conv2d(8, 1, 1)

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(F.max_pool2d(d1, 2))
        b = self.bottom(F.max_pool2d(d2, 2))
        u2 = self.dec2(torch.cat([self.up2(b), d2], 1))
        u1 = self.dec1(torch.cat([self.up1(u2), d1], 1))
        return self.out(u1).squeeze(1)


def batch(g, n=16):
    x = 0.4 * torch.randn(n, 1, 16, 16, generator=g)
    mask = torch.zeros(n, 16, 16)
    for i in range(n):
        r, c = (int(v) for v in torch.randint(1, 14, (2,), generator=g))
        mask[i, r:r + 2, :] = 1.0
        mask[i, :, c:c + 2] = 1.0
    return x + mask[:, None], mask


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = UNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        x, mask = batch(g)
        opt.zero_grad()
        logits = model(x)
        loss = F.binary_cross_entropy_with_logits(logits, mask)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            pred = (logits.detach() > 0).float()
            dice = float(2 * (pred * mask).sum() / (pred.sum() + mask.sum()).clamp(min=1))
            p.step(loss, dice=dice)
        opt.step()


def truth(bug, twin):
    fell, detail = loss_fell(bug, 0.3)
    dice = mean([r["dice"] for r in bug[-20:]])
    return fell and dice > 0.8, f"{detail}; last-20 Dice {dice:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
