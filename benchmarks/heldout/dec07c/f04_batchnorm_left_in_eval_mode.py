"""A tabular regressor normalised by a first BatchNorm1d, trained after model.eval() was never undone.

Bug: a sanity validation pass before training calls ``model.eval()`` and the loop never calls
``model.train()``. In eval mode BatchNorm1d normalises with its running statistics, still at their
initial mean 0 / variance 1 (and never updated), so the raw features (~500 +- 200) go through
unnormalised: the first Linear's outputs are ~1e3, the loss ~1e6, and SGD diverges.
Source: https://discuss.pytorch.org/t/what-does-model-eval-do-for-batchnorm-layer/7146;
https://unanswered.io/guide/pytorch-model-train-eval; Humbatova et al. ICSE 2020 (training /
inference mode confusion, 'Missing/redundant/wrong layer' behaviour).
Fixed twin: ``model.train()`` after the validation pass.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "model.eval() before training never undone: BatchNorm1d uses mean 0/var 1 on raw features ~500",
    "source": "https://discuss.pytorch.org/t/what-does-model-eval-do-for-batchnorm-layer/7146; https://unanswered.io/guide/pytorch-model-train-eval",
    "arch": "BatchNorm1d input normalisation + MLP regressor (8 raw features)",
    "kind": ["activation_explosion", "exploding_gradient", "nonfinite", "loss_spike", "initial_loss", "data_anomaly"],
    "layer": ["bn", "fc1", "<input>"],
    "step": [0, 5],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(8)
        self.fc1 = nn.Linear(8, 64)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(64, 1)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(self.bn(x))))


def data(g, n):
    z = torch.randn(n, 8, generator=g)
    y = (z[:, :4].sum(1, keepdim=True) - z[:, 4:6].prod(1, keepdim=True)) / 2
    return 500 + 200 * z, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    crit = nn.MSELoss()
    xv, yv = data(g, 256)
    model.eval()  # sanity validation before training
    with torch.no_grad():
        crit(model(xv), yv)
    if fixed:
        model.train()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("bn", "fc1")) if probe else None
    for _ in range(150):
        x, y = data(g, 64)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    ab = bug[0]["act"]["bn"]["maxabs"]
    at = twin[0]["act"]["bn"]["maxabs"]
    first_bad = next((i for i, r in enumerate(bug) if not r["loss"] < 1e4), None)
    lt = mean([r["loss"] for r in twin[-30:]])
    held = ab > 100 * at and first_bad is not None and first_bad <= 5 and lt < 1.0
    return held, (f"bn output max|x| at step 0 bug {ab:.3g} twin {at:.3g}; bug loss first >1e4 or "
                  f"non-finite at step {first_bad} (step-0 loss {bug[0]['loss']:.3g}); twin last-30 loss {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
