"""A GRU demand forecaster trained with a hand-written MAPE loss on an intermittent series.

Bug: the loss is ``mean(|y - y_hat| / |y|)`` and the demand series has days with zero sales: the
first batch holding a zero target makes the loss infinite, its gradient is +-inf, and the Adam
step turns every weight it reaches NaN. From then on loss and predictions are NaN.
Source: https://github.com/unit8co/darts/issues/2517 (TFTModel predicts nan with MapeLoss);
https://github.com/LibCity/Bigscity-LibCity/issues/219 (MAPE is inf because the ground truth has
zeros; use a masked MAPE); https://github.com/dmlc/xgboost/issues/7586.
Fixed twin: masked MAPE (targets equal to zero are left out of the mean), as LibCity does.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "MAPE loss divides by targets that are exactly zero (intermittent demand): inf loss, NaN weights",
    "source": "https://github.com/unit8co/darts/issues/2517",
    "arch": "GRU forecaster over a 24-step window + linear head (regression)",
    "kind": ["nonfinite"],
    "layer": ["<loss>", "head", "gru"],
    "step": [0, 2],
}

W = 24


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(1, 32, batch_first=True)
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        _, h = self.gru(x.unsqueeze(-1))
        return self.head(h[-1]).squeeze(1)


def series(g, n=3000):
    t = torch.arange(n, dtype=torch.float32)
    rate = 2.0 + 1.5 * torch.sin(2 * torch.pi * t / 7) + 1.0 * torch.sin(2 * torch.pi * t / 30)
    return torch.poisson(rate.clamp(min=0.05), generator=g)  # counts: many days are exactly 0


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    s = series(g)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        i = torch.randint(0, len(s) - W - 1, (64,), generator=g)
        x = torch.stack([s[j:j + W] for j in i.tolist()])
        y = s[i + W]
        opt.zero_grad()
        err = (y - model(x / 5.0)).abs()
        if fixed:
            keep = y != 0
            loss = (err[keep] / y[keep]).mean()
        else:
            loss = (err / y.abs()).mean()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    import math
    first = next((i for i, r in enumerate(bug) if not math.isfinite(r["loss"])), None)
    nan_after = all(not math.isfinite(r["loss"]) for r in bug[2:])
    lt0 = mean([r["loss"] for r in twin[:10]])
    lt1 = mean([r["loss"] for r in twin[-30:]])
    held = first is not None and first <= 2 and nan_after and lt1 < 0.8 * lt0
    return held, (f"bug loss first non-finite at step {first}, non-finite from step 2 on: {nan_after}; "
                  f"twin {lt0:.3g} -> {lt1:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
