"""Healthy: a count regressor with PoissonNLLLoss(log_input=True): the loss is negative and falls further.

Without the Stirling term (``full=False``) the Poisson NLL is ``exp(x) - y * x``, whose minimum
``y - y log y`` is negative for counts above e. With counts ~5-60 the loss crosses 0 early and
keeps falling to about -40: a negative, falling loss is what this model should show.
Source: torch.nn.PoissonNLLLoss docs (log_input=True, full=False); Cameron & Trivedi, "Regression
Analysis of Count Data", ch. 3 (Poisson regression).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "healthy": True,
    "bug": "Poisson NLL without the constant term: the loss goes negative (about -40) and keeps falling",
    "source": "torch.nn.PoissonNLLLoss docs; Cameron & Trivedi ch. 3",
    "arch": "MLP count regressor (8 -> 64 -> 64 -> 1, GELU), log-rate output",
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 64)
        self.act1 = nn.GELU()
        self.fc2 = nn.Linear(64, 64)
        self.act2 = nn.GELU()
        self.out = nn.Linear(64, 1)

    def forward(self, x):
        return self.out(self.act2(self.fc2(self.act1(self.fc1(x)))))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    w = torch.randn(8, 1, generator=g) * 0.3
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.PoissonNLLLoss(log_input=True, full=False)
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randn(64, 8, generator=g)
        rate = torch.exp(3.0 + x @ w)
        y = torch.poisson(rate, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    a = mean([r["loss"] for r in bug[:10]])
    b = mean([r["loss"] for r in bug[-20:]])
    held = b < 0 and b < a - 20
    return held, f"loss first-10 {a:.3g} -> last-20 {b:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
