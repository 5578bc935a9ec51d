"""An audio classifier whose matmul-DFT spectrogram front end runs in float16: the power overflows to inf.

Bug: the front end (a DFT as a matrix product, as conv-based mel-spectrogram layers do) was cast to
half precision with the rest of the pipeline. With 512-sample frames, a tone of amplitude ~1 gives a
DFT magnitude ~256, and its power re^2 + im^2 ~ 65 000 passes float16's maximum (65504): inf. The
log-power features then hold inf, the first conv turns them into inf/NaN, and the loss is NaN from
the first step.
Source: https://github.com/pytorch/audio/issues/2097 (Spectrogram transform with float16 precision);
https://github.com/LIHANG-HONG/birdclef2023-2nd-place-solution/issues/2 ("MelSpectrogram doesn't work
well with float16 - it produces some inf values"); https://github.com/adobe-research/convmelspec/pull/3
(clamping/normalised window "to avoid overflowing the 16-bit precision").
Fixed twin: the front end computed in float32.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "DFT power spectrogram front end in float16: |X|^2 of 512-sample frames passes 65504, inf features",
    "source": "https://github.com/pytorch/audio/issues/2097; https://github.com/LIHANG-HONG/birdclef2023-2nd-place-solution/issues/2",
    "arch": "matmul-DFT log-power front end (512-sample frames) + Conv1d classifier (4 tone classes)",
    "kind": ["nonfinite", "data_anomaly", "activation_explosion"],
    "layer": ["frontend", "<input>"],
    "step": [0, 2],
}

FRAME = 512


class DFTFrontend(nn.Module):
    """Log power of a real DFT done as one matrix product (no trainable weights)."""

    def __init__(self, half):
        super().__init__()
        n = torch.arange(FRAME).float()
        k = torch.arange(FRAME // 4).float()  # the lower quarter of the bins is enough here
        ang = 2 * math.pi * n[:, None] * k[None] / FRAME
        dtype = torch.float16 if half else torch.float32
        self.register_buffer("cos", torch.cos(ang).to(dtype))
        self.register_buffer("sin", torch.sin(ang).to(dtype))

    def forward(self, x):
        frames = x.unfold(1, FRAME, FRAME // 2).to(self.cos.dtype)  # (N, frames, FRAME)
        re, im = frames @ self.cos, frames @ self.sin
        return torch.log(re * re + im * im + 1e-3).float().transpose(1, 2)  # (N, bins, frames)


class AudioNet(nn.Module):
    def __init__(self, half):
        super().__init__()
        self.frontend = DFTFrontend(half)
        self.conv = nn.Conv1d(FRAME // 4, 32, 3, padding=1)
        self.act = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.fc = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc(self.pool(self.act(self.conv(self.frontend(x)))).flatten(1))


def batch(g, n=16):
    y = torch.randint(0, 4, (n,), generator=g)
    t = torch.arange(4096.0)
    freq = (0.02 + 0.03 * y.float())[:, None]
    amp = 0.8 + 0.4 * torch.rand(n, 1, generator=g)
    phase = torch.rand(n, 1, generator=g) * 2 * math.pi
    return amp * torch.sin(2 * math.pi * freq * t + phase) + 0.1 * torch.randn(n, 4096, generator=g), y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = AudioNet(half=not fixed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("frontend", "conv")) if probe else None
    for _ in range(120):
        x, y = batch(g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fb = bug[0]["act"]["frontend"]["finite"]
    ft = min(r["act"]["frontend"]["finite"] for r in twin)
    first_nan = next((i for i, r in enumerate(bug) if r["loss"] != r["loss"]), None)
    a = sum(r["loss"] for r in twin[:10]) / 10
    b = sum(r["loss"] for r in twin[-20:]) / 20
    held = fb < 1.0 and ft == 1.0 and first_nan == 0 and b < 0.3 * a
    return held, (f"finite fraction of the front end's output at step 0 bug {fb:.4g}, twin min {ft:.4g}; bug "
                  f"loss first NaN at step {first_nan}; twin loss first-10 {a:.3g} -> last-20 {b:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
