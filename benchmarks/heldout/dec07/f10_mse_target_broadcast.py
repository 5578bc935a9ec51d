"""A regression MLP whose (N, 1) output is compared with an (N,) target: MSELoss broadcasts to (N, N).

Bug: ``criterion(model(x), y)`` with ``y.shape == (N,)``; the loss is the mean over all N x N
pairs, whose minimiser is the batch mean for every row, so the model learns a constant and the
loss plateaus at the target variance. PyTorch only warns ("Using a target size ... that is
different to the input size").
Source: the warning in torch.nn.functional.mse_loss; PyTorch forum "Loss not decreasing -
target size different to input size" threads; Humbatova et al. ICSE 2020, Training > Loss
function > "Wrong loss function calculation".
Fixed twin: ``y.unsqueeze(1)``.
"""

import os
import sys
import warnings

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "MSELoss((N,1) output, (N,) target) broadcasts to (N,N): the model learns a constant",
    "source": "torch.nn.functional.mse_loss size warning; Humbatova et al. ICSE 2020 'Wrong loss function calculation'",
    "arch": "MLP regressor",
    "kind": ["loss_plateau"],
    "layer": ["<loss>"],
    "step": [0, 150],
}


def train(fixed=False, writer=None, probe=None):
    warnings.filterwarnings("ignore", message="Using a target size")
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 64), nn.SiLU(), nn.Linear(64, 64), nn.SiLU(), nn.Linear(64, 1))
    w = torch.randn(8, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(250):
        x = torch.randn(64, 8, generator=g)
        y = torch.tanh(x @ w) + 0.1 * x[:, 0] ** 2
        opt.zero_grad()
        out = model(x)
        loss = crit(out, y.unsqueeze(1) if fixed else y)
        loss.backward()
        if p:
            p.step(loss, mse=float(((out.detach().squeeze(1) - y) ** 2).mean()))
        opt.step()


def truth(bug, twin):
    b, t = mean([r["mse"] for r in bug[-30:]]), mean([r["mse"] for r in twin[-30:]])
    held = b > 10 * t
    return held, f"last-30 per-sample MSE bug {b:.3g} twin {t:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
