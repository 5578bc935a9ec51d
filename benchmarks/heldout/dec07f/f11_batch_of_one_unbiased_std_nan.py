"""A value regressor whose targets are standardised per batch; the epoch's last batch has one sample.

Bug: 257 samples in batches of 32 without drop_last: every 9th batch holds a single sample, and
``(y - y.mean()) / (y.std() + 1e-8)`` uses the unbiased std, which is NaN for one element (the
epsilon does not help). The target is NaN at step 8, so are the loss and every gradient, and the
weights are NaN from then on.
Source: https://github.com/torch/nn/pull/1271 ("while iterating a dataset of, say, 101 samples in
batch sizes of 10 or less, the last batch will have one sample" -> NaN from the unbiased variance);
https://github.com/karpathy/makemore/issues/22; torch.std docs (correction=1).
Fixed twin: ``drop_last`` (the single-sample batch is skipped).
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "per-batch target standardisation with the unbiased std: a last batch of 1 sample gives NaN targets at step 8",
    "source": "https://github.com/torch/nn/pull/1271; https://github.com/karpathy/makemore/issues/22; torch.std docs",
    "arch": "MLP value regressor on per-batch standardised returns",
    "kind": ["nonfinite", "data_anomaly"],
    "layer": ["<loss>", "<input>"],
    "step": [8, 9],
}

N, B = 257, 32


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(6, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 1))
    X = torch.randn(N, 6, generator=g)
    Y = 10 + 5 * torch.tanh(X @ torch.randn(6, generator=g)) + 0.3 * torch.randn(N, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    steps = 0
    while steps < 150:
        perm = torch.randperm(N, generator=g)
        for i in range(0, N, B):
            idx = perm[i:i + B]
            if fixed and len(idx) < B:
                continue
            x, y = X[idx], Y[idx]
            t = (y - y.mean()) / (y.std() + 1e-8)
            opt.zero_grad()
            loss = crit(model(x).squeeze(1), t)
            loss.backward()
            if p:
                p.step(loss, target_finite=bool(torch.isfinite(t).all()))
            opt.step()
            steps += 1
            if steps >= 150:
                break


def truth(bug, twin):
    bad_t = [i for i, r in enumerate(bug) if not r["target_finite"]]
    nan_loss = [i for i, r in enumerate(bug) if not math.isfinite(r["loss"])]
    w_after = bug[20]["weight"]["0"]
    tw_nan = sum(1 for r in twin if not math.isfinite(r["loss"]))
    l0, l1 = mean([r["loss"] for r in twin[:10]]), mean([r["loss"] for r in twin[-20:]])
    held = bad_t[:1] == [8] and nan_loss[:1] == [8] and not math.isfinite(w_after) and tw_nan == 0 and l1 < 0.3 * l0
    return held, (f"bug target non-finite first at {bad_t[:1]}, loss NaN first {nan_loss[:1]}, layer 0 weight norm "
                  f"at step 20 {w_after}; twin NaN steps {tw_nan}, loss {l0:.3g} -> {l1:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
