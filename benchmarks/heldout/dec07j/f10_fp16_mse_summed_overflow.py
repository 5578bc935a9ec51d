"""A model run in float16 whose MSE is reduced with ``.sum()`` over the batch: the sum overflows to inf.

Bug: ``model.half()`` and ``loss = ((pred - y) ** 2).sum()`` in float16 on targets in the
hundreds: the per-sample squared errors are ~1e4-1e5 and their sum over 128 samples exceeds
float16's 65504, so the loss is ``inf`` from the first step and every gradient is NaN/inf; the
weights turn NaN after the first step. The twin keeps the model in float16 but reduces in
float32 (as autocast does for ``sum``/``mse_loss``) with a mean.
Source: PyTorch AMP docs, "CPU/CUDA ops that can autocast to float32" (sum, mse_loss are run in
float32 because of this overflow, https://pytorch.org/docs/stable/amp.html); NVIDIA "Mixed
Precision Training" guide (reductions in FP32).
Fixed twin: ``((pred.float() - y.float()) ** 2).mean()``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "float16 model with an MSE summed in float16 over the batch: the loss is inf at step 0, weights NaN after",
    "source": "https://pytorch.org/docs/stable/amp.html (ops that autocast to float32)",
    "arch": "MLP regressor in float16 (house-price-like targets in the hundreds)",
    "kind": ["nonfinite", "loss_spike", "scaler_collapse"],
    "layer": ["<loss>", "fc3"],
    "step": [0, 2],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(8, 32), nn.Linear(32, 32), nn.Linear(32, 1)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x))))).squeeze(1)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    w_true = torch.randn(8, generator=g)
    model = Net().half()
    opt = torch.optim.SGD(model.parameters(), lr=3e-4)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(150):
        x = torch.randn(128, 8, generator=g)
        y = 300 + 40 * (x @ w_true)
        xh = x.half()
        opt.zero_grad()
        pred = model(xh)
        loss = ((pred.float() - y) ** 2).mean() if fixed else ((pred - y.half()) ** 2).sum()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    import math
    first = next((i for i, r in enumerate(bug) if not math.isfinite(r["loss"])), None)
    twin_ok = all(math.isfinite(r["loss"]) for r in twin)
    fell = sum(r["loss"] for r in twin[-10:]) / 10 < 0.2 * sum(r["loss"] for r in twin[:10]) / 10
    held = first is not None and first <= 2 and twin_ok and fell
    return held, f"bug loss first non-finite at step {first}; twin finite {twin_ok}, twin loss fell 5x {fell}"


if __name__ == "__main__":
    sys.exit(main(globals()))
