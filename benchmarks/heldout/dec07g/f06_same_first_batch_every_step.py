"""`x, y = next(iter(loader))` inside the training loop, with shuffle=False.

Each call builds a fresh iterator, so every step trains on the same first batch of 32 samples:
the training loss falls to ~0 (the batch is memorised) while the model never sees the rest of the
data, and its loss on held-out data stays far above the fixed twin's.
"""
import os
import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "kind": ["data_anomaly"],
    "layer": ["<input>"],
    "step": (0, 60),
    "bug": "next(iter(loader)) each step with shuffle=False: the same first batch every step",
    "source": "PyTorch forum 'next(iter(dataloader)) returns the same batch' threads; "
              "StackOverflow 'why does next(iter(train_loader)) always give the same data'",
    "arch": "MLP regression on a nonlinear 16-feature function, DataLoader",
}


def make_data(g, n):
    x = torch.randn(n, 16, generator=g)
    w = torch.randn(16, generator=torch.Generator().manual_seed(7))
    y = torch.sin(x @ w / 2) + 0.3 * (x[:, 0] * x[:, 1])
    return x, y[:, None]


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x, y = make_data(g, 4096)
    xv, yv = make_data(g, 512)
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=fixed,
                        generator=torch.Generator().manual_seed(1))
    model = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 1))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.MSELoss()
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    it = iter(loader)
    for step in range(250):
        if fixed:
            try:
                xb, yb = next(it)
            except StopIteration:
                it = iter(loader)
                xb, yb = next(it)
        else:
            xb, yb = next(iter(loader))
        loss = crit(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        if p:
            extra = {}
            if step % 50 == 49:
                with torch.no_grad():
                    extra["val"] = float(crit(model(xv), yv))
            p.step(loss, **extra)
        opt.step()


def truth(bug, twin):
    vb = [r["val"] for r in bug if "val" in r][-1]
    vt = [r["val"] for r in twin if "val" in r][-1]
    tb = mean([r["loss"] for r in bug[-20:]])
    tt = mean([r["loss"] for r in twin[-20:]])
    held = vb > 3 * vt and tb < 0.2 * tt
    return held, (f"held-out MSE at the end bug {vb:.3g} vs twin {vt:.3g}; training loss last-20 bug "
                  f"{tb:.3g} vs twin {tt:.3g} (the bug memorises its one batch)")


if __name__ == "__main__":
    sys.exit(main(globals()))
