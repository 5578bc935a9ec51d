"""A count regressor with an ``exp`` output trained by MSE on raw counts: the first step overflows.

Bug: the model predicts counts (0..~2000) as ``exp(linear(h))`` (to keep them positive) and is
trained with MSE on the raw counts. The gradient of (exp(z) - y)^2 is 2 (exp(z) - y) exp(z): on the
first batches it is ~1e3-1e4 per sample and grows with exp(z): by step 2 the gradient norm is
~1e23, the step throws the weights so far that the log-rate is hugely negative for every input,
exp(z) underflows to 0, the ReLU layer is dead and every gradient is exactly 0 from step 3: the
model predicts 0 counts for the rest of the run.
Source: https://github.com/qqwweee/keras-yolo3/issues/257 and https://github.com/foolwood/DaSiamRPN/issues/48
(exp of an unbounded regression output blowing up in training); torch.nn.PoissonNLLLoss docs (the
log link for counts, log_input=True).
Fixed twin: the same exp-link model trained with PoissonNLLLoss on the log-rate.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "exp output trained with MSE on raw counts up to ~2000: gradient 2(e^z - y)e^z explodes at step 2, then everything is dead",
    "source": "https://github.com/foolwood/DaSiamRPN/issues/48; https://github.com/qqwweee/keras-yolo3/issues/257; torch.nn.PoissonNLLLoss docs",
    "arch": "tabular count regressor (MLP, exp output)",
    "kind": ["exploding_gradient", "nonfinite", "activation_explosion", "loss_spike", "dead_activation"],
    "layer": ["out", "fc", "act", "<loss>", "<optimizer>"],
    "step": [0, 3],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 32)
        self.act = nn.ReLU()
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        return self.out(self.act(self.fc(x))).squeeze(1)  # the log-rate


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    w = torch.randn(8, generator=g) * 0.5
    for _ in range(150):
        x = torch.randn(64, 8, generator=g)
        y = torch.poisson(torch.exp(5 + x @ w).clamp(max=3000), generator=g)
        z = model(x)
        if fixed:
            loss = nn.functional.poisson_nll_loss(z, y, log_input=True)
        else:
            loss = ((torch.exp(z) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss, mae=float((torch.exp(z.detach()) - y).abs().mean()))
        opt.step()


def truth(bug, twin):
    gb = max(bug[i]["grad"]["out"] for i in range(4))
    gt = max(twin[i]["grad"]["out"] for i in range(4))
    zero = all(r["grad"]["fc"] == 0 for r in bug[4:])
    mb, mt = mean([r["mae"] for r in bug[-20:]]), mean([r["mae"] for r in twin[-20:]])
    held = gb > 1e10 * gt and zero and mb > 3 * mt
    return held, (f"max out grad steps 0-3 bug {gb:.3g} twin {gt:.3g}; bug fc grad exactly 0 from step 4 on: {zero}; "
                  f"last-20 count MAE bug {mb:.3g} twin {mt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
