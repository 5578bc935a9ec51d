"""A sales forecaster (GRU over lagged log-sales) whose log transform meets a day with zero sales.

Bug: the pipeline takes ``np.log(sales)`` of inputs and target (meant ``log1p``). Every batch is
fine until the first store-closure day with 0 sales: its log is -inf, the MSE loss is inf at that
step and the gradients NaN, and the NaN weights never recover.
Source: Cross Validated "How should I transform non-negative data including zeros?" (Hyndman,
2010; copy in nvidia/Nemotron-CC-Math-v1); https://dataduets.com/2023/12/how-to-and-not-to-log-transform-zero.html
(36 % of log-specified papers had the log-of-zero problem); Humbatova et al. ICSE 2020, 'Wrong
preprocessing'.
Fixed twin: ``log1p``.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CLOSED_STEP = 70  # the first batch holding a store-closure day (0 sales) as its target

CASE = {
    "bug": "np.log on sales (meant log1p): the first zero-sales day makes the target -inf, loss inf, NaN from then",
    "source": "Cross Validated 'How should I transform non-negative data including zeros?'; https://dataduets.com/2023/12/how-to-and-not-to-log-transform-zero.html",
    "arch": "GRU forecaster over 14 lagged log-sales + linear head",
    "kind": ["nonfinite", "data_anomaly", "loss_spike"],
    "layer": ["<loss>", "<input>"],
    "step": [CLOSED_STEP, CLOSED_STEP + 1],
}


class Forecaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(1, 32, batch_first=True)
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        return self.head(self.gru(x)[1][-1])


def batch(g, step, fixed):
    """Weekly-seasonal Poisson sales of 32 stores; a closure day is the target at CLOSED_STEP."""
    t0 = torch.randint(0, 300, (32, 1), generator=g).float()
    t = t0 + torch.arange(15).float()
    rate = 200 + 80 * torch.sin(2 * math.pi * t / 7)
    sales = torch.poisson(rate, generator=g).clamp(min=1)
    if step in (CLOSED_STEP, CLOSED_STEP + 70):  # two closure days in the run
        sales[step % 32, -1] = 0.0  # a store closed that day (holiday, renovation...)
    f = torch.log1p if fixed else torch.log
    z = (f(sales) - 5.2) / 0.4
    return z[:, :14, None], z[:, 14:]


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Forecaster()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for step in range(200):
        x, y = batch(g, step, fixed)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    first = next((i for i, r in enumerate(bug) if not math.isfinite(r["loss"])), None)
    grad_nan = next((i for i, r in enumerate(bug) if r["grad"]["head"] is None or not math.isfinite(r["grad"]["head"])), None)
    twin_ok = all(math.isfinite(r["loss"]) for r in twin)
    l0 = mean([r["loss"] for r in twin[:10]])
    lt = mean([r["loss"] for r in twin[CLOSED_STEP - 20:CLOSED_STEP]])
    held = first == CLOSED_STEP and grad_nan == CLOSED_STEP and twin_ok and lt < 0.5 * l0
    return held, (f"bug loss first non-finite at step {first} (head grad at {grad_nan}); twin finite throughout {twin_ok}, "
                  f"twin loss first-10 {l0:.3g} -> steps {CLOSED_STEP - 20}-{CLOSED_STEP - 1} {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
