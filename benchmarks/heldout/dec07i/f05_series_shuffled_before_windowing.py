"""A GRU forecaster whose series was shuffled in time BEFORE the sliding windows were cut.

Bug: ``np.random.shuffle(series)`` meant for the training windows is applied to the raw series,
so each window holds 24 unrelated points and its "next value" is unrelated to them: the model
can only learn the series' mean, and the loss stays at the series' variance from the first step.
Source: https://community.deeplearning.ai/t/shuffle-in-time-series/384140 (windows cut first,
then shuffled "together" with their label); https://stats.stackexchange.com/questions/40638
("cut your halves into windows individually and [then] shuffle those");
https://medium.com/@srmousavi25/how-to-fix-a-common-mistake-in-lstm-time-series-forecasting-4d4d51d9948f;
Humbatova et al. ICSE 2020, 'wrong preprocessing'.
Fixed twin: windows cut from the ordered series, then the windows shuffled.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "series shuffled in time before windowing: windows and next values unrelated, loss stays at the variance",
    "source": "https://community.deeplearning.ai/t/shuffle-in-time-series/384140; https://stats.stackexchange.com/questions/40638",
    "arch": "GRU one-step forecaster (24-step windows) + linear head",
    "kind": ["loss_plateau", "data_anomaly"],
    "layer": ["<loss>", "<input>"],
    "step": [0, 150],
}

W = 24


class Forecaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(1, 32, batch_first=True)
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        return self.head(self.gru(x)[1][-1])


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    t = torch.arange(14000).float()
    series = torch.sin(2 * math.pi * t / 50) + 0.5 * torch.sin(2 * math.pi * t / 17) + 0.1 * torch.randn(14000, generator=g)
    series = (series - series.mean()) / series.std()
    if not fixed:
        series = series[torch.randperm(len(series), generator=g)]  # the bug: shuffles time itself
    windows = series.unfold(0, W + 1, 1)  # (n, W+1): 24 inputs and the next value
    windows = windows[torch.randperm(len(windows), generator=g)]  # what was meant: shuffle windows
    model = Forecaster()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for step in range(200):
        w = windows[step * 64:(step + 1) * 64]
        x, y = w[:, :W, None], w[:, W:]
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lb = mean([r["loss"] for r in bug[-40:]])
    lt = mean([r["loss"] for r in twin[-40:]])
    held = lb > 0.85 and lt < 0.1
    return held, f"last-40 loss bug {lb:.3g} twin {lt:.3g} (series variance 1)"


if __name__ == "__main__":
    sys.exit(main(globals()))
