"""A GRU forecaster that "normalises" its one input feature with ``nn.LayerNorm(1)``.

Bug: the series has one feature per time step, shape (N, T, 1), and LayerNorm normalises the last
dimension: over a single value, x - mean(x) = 0, so the layer outputs its bias whatever the input.
Everything downstream sees a constant sequence; the model can only predict the mean target.
Source: https://github.com/pytorch/pytorch/issues/108956 ("nn.LayerNorm outputs zeros for single
column batch"); https://github.com/NVIDIA-Merlin/Transformers4Rec/pull/151 (continuous features of
dim 1 came out of layer norm as ~0).
Fixed twin: the feature is standardised over the time axis (LayerNorm over T, one value per step).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "nn.LayerNorm(1) on a single-feature series: x - mean(x) = 0, the layer outputs its bias for every input",
    "source": "https://github.com/pytorch/pytorch/issues/108956; https://github.com/NVIDIA-Merlin/Transformers4Rec/pull/151",
    "arch": "GRU sequence regressor over a univariate series",
    "kind": ["activation_collapse", "data_anomaly", "loss_plateau"],
    "layer": ["norm", "<input>"],
    "step": [0, 5],
}

T = 24


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed
        self.norm = nn.LayerNorm(T) if fixed else nn.LayerNorm(1)
        self.proj = nn.Linear(1, 16)
        self.gru = nn.GRU(16, 32, batch_first=True)
        self.head = nn.Linear(32, 1)

    def forward(self, x):  # x: (N, T, 1)
        h = self.norm(x.squeeze(-1)).unsqueeze(-1) if self.fixed else self.norm(x)
        return self.head(self.gru(self.proj(h))[1][-1])


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("norm",)) if probe else None
    t = torch.arange(T).float()
    for _ in range(150):
        freq = 0.2 + 0.6 * torch.rand(64, 1, generator=g)
        level = 5 * torch.randn(64, 1, generator=g)
        x = level + torch.sin(freq * t) + 0.05 * torch.randn(64, T, generator=g)
        y = freq  # the target: the series' frequency
        opt.zero_grad()
        loss = crit(model(x.unsqueeze(-1)), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    sb = mean([r["act"]["norm"]["std"] for r in bug])
    st = mean([r["act"]["norm"]["std"] for r in twin])
    lb, lt = mean([r["loss"] for r in bug[-30:]]), mean([r["loss"] for r in twin[-30:]])
    held = sb < 1e-3 and st > 0.5 and lt < 0.2 * lb
    return held, f"norm output std bug {sb:.2g} twin {st:.3g}; last-30 loss bug {lb:.3g} twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
