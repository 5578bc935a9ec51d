"""An MLP regressor with a "safe" square-root feature written as torch.where(h > 0, sqrt(h), 0).

Bug: the forward is finite (the where picks 0 for h <= 0), but backward multiplies the masked
branch's gradient 0 by d sqrt(h)/dh = NaN for h < 0: the first Linear's gradient is NaN at step 0,
its weights NaN after the first update. The loss stays finite (the same where sends the NaN units
to 0): a silent corruption, the units with NaN weights are lost for good.
Source: https://github.com/pytorch/pytorch/issues/187297 (torch.where backward propagates NaN from
the inactive sqrt branch); https://github.com/pytorch/pytorch/issues/52248.
Fixed twin: the documented work-around, a where inside the sqrt too (sqrt of a safe value).
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "torch.where(h > 0, sqrt(h), 0): finite forward, NaN gradient from the unselected sqrt branch",
    "source": "https://github.com/pytorch/pytorch/issues/187297; https://github.com/pytorch/pytorch/issues/52248",
    "arch": "MLP regressor with a square-root feature layer",
    "kind": ["nonfinite"],
    "layer": ["root", "inp"],
    "step": [0, 1],
}


class SafeRoot(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed

    def forward(self, h):
        pos = h > 0
        inner = torch.where(pos, h, torch.ones_like(h)) if self.fixed else h
        return torch.where(pos, torch.sqrt(inner), torch.zeros_like(h))


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.inp = nn.Linear(8, 64)
        self.root = SafeRoot(fixed)
        self.hid = nn.Linear(64, 64)
        self.act = nn.GELU()
        self.out = nn.Linear(64, 1)

    def forward(self, x):
        return self.out(self.act(self.hid(self.root(self.inp(x)))))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net(fixed)
    w = torch.randn(8, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("root",)) if probe else None
    for _ in range(150):
        x = torch.randn(128, 8, generator=g)
        y = (x @ w).abs().sqrt().unsqueeze(1)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    bad_grad = [i for i, r in enumerate(bug) if not math.isfinite(r["grad"]["inp"])]
    fwd_ok = bug[0]["act"]["root"]["finite"] == 1.0 and math.isfinite(bug[0]["loss"])
    nan_w = [i for i, r in enumerate(bug) if not math.isfinite(r["weight"]["inp"])]
    tw_bad = sum(1 for r in twin if not math.isfinite(r["grad"]["inp"]) or not math.isfinite(r["loss"]))
    l0, l1 = mean([r["loss"] for r in twin[:10]]), mean([r["loss"] for r in twin[-20:]])
    held = bad_grad[:1] == [0] and fwd_ok and nan_w[:1] == [1] and tw_bad == 0 and l1 < 0.3 * l0
    return held, (f"bug inp grad non-finite first {bad_grad[:1]} with forward finite {fwd_ok}, inp weights non-finite first "
                  f"{nan_w[:1]}, bug last-20 loss {mean([r['loss'] for r in bug[-20:]]):.3g}; twin non-finite steps {tw_bad}, loss {l0:.3g} -> {l1:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
