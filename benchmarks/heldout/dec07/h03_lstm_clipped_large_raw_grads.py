"""Healthy: an LSTM on long sequences whose raw gradient norms are large, clipped to 1 every step.

Fools: the raw (pre-clipping) gradient norm is far above 1 on many steps, as usual for LSTMs on
long sequences; the loop clips with ``clip_grad_norm_(..., 1.0)`` and says so (``grad_clip=1.0``).
Source of the recipe: the PyTorch word_language_model example (``--clip 0.25``,
https://github.com/pytorch/examples/blob/main/word_language_model/main.py).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {"healthy": True, "fools": "raw gradient norms >> 1 every step, clipped (grad_clip=1.0 given)",
        "source": "https://github.com/pytorch/examples/blob/main/word_language_model/main.py",
        "arch": "LSTM sequence regressor (100 steps)"}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(1, 48, batch_first=True)
        self.out = nn.Linear(48, 1)

    def forward(self, x):
        h, _ = self.lstm(x)
        return self.out(h)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.MSELoss(reduction="sum")
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit, grad_clip=1.0)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randn(16, 100, 1, generator=g)
        y = 0.1 * x.cumsum(1).clamp(-3, 3)
        opt.zero_grad()
        loss = crit(model(x), y) / 16 / 10
        loss.backward()
        if p:
            p.step(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.5)
    raw = mean([sum(v or 0 for v in r["grad"].values()) for r in bug])
    return fell and raw > 2, f"{said}; mean raw grad norm sum {raw:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
