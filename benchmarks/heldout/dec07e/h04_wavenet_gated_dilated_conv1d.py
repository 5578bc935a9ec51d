"""Healthy: a WaveNet-style stack of gated, dilated Conv1d blocks with weight normalisation.

Each block computes tanh(conv_f(x)) * sigmoid(conv_g(x)) with dilations 1, 2, 4, 8 and a residual
1x1 projection; every conv is weight-normalised (parametrizations.weight_norm, so the weight is
g * v / |v|). Gated units legitimately sit near tanh/sigmoid saturation for some inputs, and the
weight-norm split makes each conv's gradient land on two parameters (g and v) of very different
sizes. It trains to classify 4 chirp/tone classes of 256-sample clips.
Source: van den Oord et al., "WaveNet", arXiv:1609.03499, sec. 2.3-2.4 (gated activation units,
residual connections, dilations); Salimans & Kingma NeurIPS 2016 (weight normalisation).
"""

import math
import os
import sys

import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {
    "healthy": True,
    "bug": "gated (tanh * sigmoid) dilated Conv1d stack with weight_norm and residual 1x1 convs",
    "source": "van den Oord et al. 2016 (WaveNet) sec. 2.3-2.4; Salimans & Kingma NeurIPS 2016",
    "arch": "1-D conv: input conv + 4 gated dilated residual blocks (16 ch) + pooled linear head",
}


class GatedBlock(nn.Module):
    def __init__(self, ch, dilation):
        super().__init__()
        self.filt = weight_norm(nn.Conv1d(ch, ch, 3, dilation=dilation, padding=dilation))
        self.gate = weight_norm(nn.Conv1d(ch, ch, 3, dilation=dilation, padding=dilation))
        self.res = weight_norm(nn.Conv1d(ch, ch, 1))

    def forward(self, x):
        return x + self.res(torch.tanh(self.filt(x)) * torch.sigmoid(self.gate(x)))


class WaveNetClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = weight_norm(nn.Conv1d(1, 16, 3, padding=1))
        self.blocks = nn.Sequential(*[GatedBlock(16, d) for d in (1, 2, 4, 8)])
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc(self.pool(torch.relu(self.blocks(self.inp(x)))).flatten(1))


def batch(g, n=32):
    y = torch.randint(0, 4, (n,), generator=g)
    t = torch.arange(256.0) / 256
    phase = torch.rand(n, 1, generator=g) * 2 * math.pi
    f0 = torch.where(y[:, None] % 2 == 0, 10.0, 25.0)
    sweep = torch.where(y[:, None] < 2, 0.0, 30.0)  # classes 2, 3 are chirps
    x = torch.sin(2 * math.pi * (f0 * t + sweep * t * t) + phase) + 0.5 * torch.randn(n, 256, generator=g)
    return x[:, None], y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = WaveNetClassifier()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(180):
        x, y = batch(g)
        opt.zero_grad()
        out = model(x)
        loss = crit(out, y)
        loss.backward()
        if p:
            p.step(loss, acc=float((out.argmax(1) == y).float().mean()))
        opt.step()


def truth(bug, twin):
    fell, detail = loss_fell(bug, 0.3)
    acc = mean([r["acc"] for r in bug[-20:]])
    return fell and acc > 0.9, f"{detail}; last-20 accuracy {acc:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
