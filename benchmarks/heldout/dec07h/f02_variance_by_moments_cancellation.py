"""A hand-written input standardisation computing var = E[x^2] - E[x]^2: negative variance, sqrt NaN.

Bug: a sensor MLP standardises its inputs inside the model with per-batch statistics, the variance
taken as ``(x * x).mean(0) - x.mean(0) ** 2``. The raw sensor columns sit at ~2e4 with a spread of
~1: in float32 the two terms (~4e8) cancel catastrophically, the "variance" comes out negative for
some columns and ``sqrt`` gives NaN in the forward of the normalisation layer.
Source: https://github.com/tenstorrent/tt-metal/issues/45968 (batch_norm E[x^2]-E[x]^2 -> NaN for
large-mean inputs); https://github.com/neuraloperator/neuraloperator/issues/329 (a normaliser's
negative variance); https://github.com/anthonymlortiz/lcn/issues/4 (NaN from var < 0).
Fixed twin: the two-pass variance ``((x - mean) ** 2).mean(0)``.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "custom standardisation with var = E[x^2] - E[x]^2 on inputs near 2e4: cancellation gives negative variance, sqrt NaN",
    "source": "https://github.com/tenstorrent/tt-metal/issues/45968; https://github.com/neuraloperator/neuraloperator/issues/329",
    "arch": "tabular sensor MLP with a hand-written batch standardisation layer",
    "kind": ["nonfinite"],
    "layer": ["norm"],
    "step": [0, 1],
}


class Standardise(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed

    def forward(self, x):
        m = x.mean(0, keepdim=True)
        if self.fixed:
            var = ((x - m) ** 2).mean(0, keepdim=True)
        else:
            var = (x * x).mean(0, keepdim=True) - m * m
        return (x - m) / torch.sqrt(var + 1e-5)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential()
    model.add_module("norm", Standardise(fixed))
    model.add_module("fc1", nn.Linear(12, 64))
    model.add_module("act", nn.ReLU())
    model.add_module("out", nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("norm",)) if probe else None
    w = torch.randn(12, 1, generator=g)
    for _ in range(150):
        z = torch.randn(128, 12, generator=g)
        x = 2.0e4 + z  # raw readings: a large offset, unit spread
        y = torch.tanh(z) @ w / 3
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fin = [r["act"]["norm"]["finite"] for r in bug]
    first = next((i for i, f in enumerate(fin) if f < 1.0), None)
    lb0 = bug[0]["loss"]
    l0, lt = mean([r["loss"] for r in twin[:10]]), mean([r["loss"] for r in twin[-20:]])
    held = first == 0 and not math.isfinite(lb0) and lt < 0.3 * l0
    return held, f"bug norm output finite fraction step 0 {fin[0]:.2f} (first non-finite {first}), loss {lb0}; twin loss {l0:.3g} -> {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
