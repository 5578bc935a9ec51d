"""Healthy: curriculum learning; at step 100 the harder examples are added and the loss jumps, then falls.

Steps 0-99 draw well-separated (easy) examples; from step 100 on, half of each batch is hard
(5x the noise). The loss steps up at the switch (x400 here), as a curriculum's loss does, and
then decreases slowly towards the hard half's noise floor. Nothing is broken.
Source: Bengio, Louradour, Collobert & Weston, "Curriculum Learning", ICML 2009, sec. 2-4.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "healthy": True,
    "bug": "curriculum: harder examples added at step 100, the loss jumps x400 there, then decreases slowly",
    "source": "Bengio et al. ICML 2009 (Curriculum Learning)",
    "arch": "MLP classifier (20 -> 64 -> 64 -> 5, GELU)",
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 64)
        self.act1 = nn.GELU()
        self.fc2 = nn.Linear(64, 64)
        self.act2 = nn.GELU()
        self.out = nn.Linear(64, 5)

    def forward(self, x):
        return self.out(self.act2(self.fc2(self.act1(self.fc1(x)))))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    centers = torch.randn(5, 20, generator=g)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for step in range(220):
        y = torch.randint(0, 5, (64,), generator=g)
        noise = torch.full((64, 1), 0.3)
        if step >= 100:
            noise[32:] = 1.6
        x = centers[y] + noise * torch.randn(64, 20, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    first = mean([r["loss"] for r in bug[:10]])
    before = mean([r["loss"] for r in bug[90:100]])
    jump = mean([r["loss"] for r in bug[100:105]])
    last = mean([r["loss"] for r in bug[-20:]])
    held = before < 0.2 * first and jump > 10 * before and last < jump
    return held, f"loss first-10 {first:.3g}, steps 90-99 {before:.3g}, 100-104 {jump:.3g}, last-20 {last:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
