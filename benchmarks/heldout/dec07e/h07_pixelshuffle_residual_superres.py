"""Healthy: a 2x super-resolution net with PixelShuffle that learns only the residual over bilinear upsampling.

The network predicts the difference between the high-resolution image and the bilinear upsample of
the low-resolution one (a VDSR/ESPCN-style global residual). That residual is small, so the loss is
~5e-3 at the first step and ends near 1e-5: tiny absolute values that still fall by orders of
magnitude, with a last layer initialised small so the net starts as plain bilinear upsampling.
Source: Shi et al., "Real-Time Single Image and Video Super-Resolution Using an Efficient Sub-Pixel
Convolutional Neural Network" (ESPCN), CVPR 2016, sec. 2.2 (PixelShuffle); Kim, Lee & Lee,
"Accurate Image Super-Resolution Using Very Deep Convolutional Networks" (VDSR), CVPR 2016, sec. 3.1
(residual learning).
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
    "bug": "residual super-resolution: loss ~5e-3 at start, ~1e-5 at the end, last conv initialised small",
    "source": "Shi et al. CVPR 2016 (ESPCN) sec. 2.2; Kim et al. CVPR 2016 (VDSR) sec. 3.1",
    "arch": "Conv2d x3 + PixelShuffle(2), residual over bilinear upsampling (8x8 -> 16x16)",
}


class ESPCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.act1 = nn.Tanh()
        self.conv2 = nn.Conv2d(32, 16, 3, padding=1)
        self.act2 = nn.Tanh()
        self.conv3 = nn.Conv2d(16, 4, 3, padding=1)
        self.shuffle = nn.PixelShuffle(2)
        nn.init.normal_(self.conv3.weight, std=1e-3)
        nn.init.zeros_(self.conv3.bias)

    def forward(self, lr):
        up = F.interpolate(lr, scale_factor=2, mode="bilinear", align_corners=False)
        return up + self.shuffle(self.conv3(self.act2(self.conv2(self.act1(self.conv1(lr))))))


def batch(g, n=32):
    # sharp rectangles on the 2x grid: bilinear upsampling blurs their edges, the net restores them
    hr = torch.zeros(n, 1, 16, 16)
    for i in range(n):
        for _ in range(2):
            r, c = (2 * int(v) for v in torch.randint(0, 6, (2,), generator=g))  # on the 2x grid:
            h, w = (2 * int(v) for v in torch.randint(1, 4, (2,), generator=g))  # recoverable
            hr[i, 0, r:r + h, c:c + w] += float(torch.rand(1, generator=g)) * 0.5 + 0.25
    lr = F.avg_pool2d(hr, 2)
    return lr, hr


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = ESPCN()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        lr, hr = batch(g)
        opt.zero_grad()
        loss = crit(model(lr), hr)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, detail = loss_fell(bug, 0.05)
    first = mean([r["loss"] for r in bug[:10]])
    return fell and first < 0.05, f"{detail} (absolute values small from the start)"


if __name__ == "__main__":
    sys.exit(main(globals()))
