"""An MLP regressor trained with its weights in bfloat16 (no fp32 master copy): the updates round away.

Bug: ``model.to(torch.bfloat16)`` and inputs cast to bf16 to "train in half precision" on CPU,
with Adam at lr 1e-4. bf16 keeps 8 significant bits: an update (~lr per weight) smaller than half
the spacing of a weight (~5e-4 to 1e-3 for weights ~0.1-0.3) is rounded off, so most weights never change
and the loss stalls far above the fp32 twin's.
Source: Micikevicius et al., "Mixed Precision Training", ICLR 2018, sec. 3.1 (FP32 master copy of
weights: updates too small for the half-precision weight are lost); Zamirai et al., "Revisiting
BFloat16 Training", arXiv:2010.06192, sec. 3 (nearest rounding of weight updates stalls pure bf16
training).
Fixed twin: the same training in float32.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "weights kept in bfloat16 without an fp32 master copy: lr*grad below half a bf16 ulp is rounded away",
    "source": "Micikevicius et al. ICLR 2018 sec. 3.1; Zamirai et al. arXiv:2010.06192 sec. 3",
    "arch": "MLP regressor (16 -> 64 -> 64 -> 1, Tanh)",
    "kind": ["frozen_weights", "loss_plateau", "vanishing_gradient"],
    "layer": ["<optimizer>", "<loss>"],
    "step": [0, 100],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.act1 = nn.Tanh()
        self.fc2 = nn.Linear(64, 64)
        self.act2 = nn.Tanh()
        self.fc3 = nn.Linear(64, 1)

    def forward(self, x):
        return self.fc3(self.act2(self.fc2(self.act1(self.fc1(x)))))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    w_true = torch.randn(16, 1, generator=g) / 4
    dtype = torch.float32 if fixed else torch.bfloat16
    model = Net().to(dtype)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(250):
        x = torch.randn(64, 16, generator=g)
        y = torch.tanh(x @ w_true)
        opt.zero_grad()
        loss = crit(model(x.to(dtype)), y.to(dtype))
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def _moved(rows, name):
    return abs(rows[-1]["weight"][name] - rows[0]["weight"][name]) / rows[0]["weight"][name]


def truth(bug, twin):
    mb, mt = _moved(bug, "fc1"), _moved(twin, "fc1")
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = mt > 3 * mb and lb > 3 * lt
    return held, f"fc1 relative weight-norm change bug {mb:.2g} twin {mt:.2g}; last-30 loss bug {lb:.3g} twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
