"""Healthy: a dilated causal 1-D conv (TCN) forecaster that reaches the noise floor early and stays.

Fools: the loss falls fast for ~20 steps and then sits flat for the rest of the run near the
irreducible noise variance (0.09; it sits at ~0.13): a long plateau that is success, not failure; the targets are
a sum of seasonal components at very different periods.
Source of the recipe: Bai, Kolter & Koltun, "An Empirical Evaluation of Generic Convolutional and
Recurrent Networks for Sequence Modeling", 2018 (TCN: dilated causal convolutions, residual
blocks; GELU here in place of ReLU).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {"healthy": True, "fools": "loss reaches the noise floor by ~step 20 and stays flat (plateau = success)",
        "source": "Bai, Kolter & Koltun 2018 (TCN)", "arch": "4-block dilated causal Conv1d TCN, one-step forecast"}

W = 64


class Block(nn.Module):
    def __init__(self, c, dil):
        super().__init__()
        self.pad = 2 * dil
        self.conv = nn.Conv1d(c, c, 3, dilation=dil)
        self.act = nn.GELU()  # with ReLU a quarter of block 0's channels died (checked on raw activations)

    def forward(self, x):
        return x + self.act(self.conv(nn.functional.pad(x, (self.pad, 0))))


class TCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Conv1d(1, 16, 1)
        self.blocks = nn.Sequential(*[Block(16, d) for d in (1, 2, 4, 8)])
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        h = self.blocks(self.inp(x.unsqueeze(1)))
        return self.head(h[:, :, -1]).squeeze(1)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    t = torch.arange(6000, dtype=torch.float32)
    clean = (torch.sin(2 * torch.pi * t / 24) + 0.5 * torch.sin(2 * torch.pi * t / 7)
             + 0.3 * torch.sin(2 * torch.pi * t / 50))
    s = clean + 0.3 * torch.randn(len(t), generator=g)
    model = TCN()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        i = torch.randint(0, len(s) - W - 1, (64,), generator=g)
        x = torch.stack([s[j:j + W] for j in i.tolist()])
        y = s[i + W]
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.5)
    late = mean([r["loss"] for r in bug[-50:]])
    return fell and late < 0.2, f"{said}; last-50 MSE {late:.3g} (noise floor 0.09)"


if __name__ == "__main__":
    sys.exit(main(globals()))
