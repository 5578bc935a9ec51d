"""clip_grad_value_(params, 1e-4) where clip_grad_norm_(params, 1.0) was meant.

Every gradient element is clamped to +-1e-4, so SGD's update is about lr * 1e-4 per element no
matter how large the gradient: the LSTM forecaster's weights barely move and its loss stays near
where it started while the fixed twin's falls by an order of magnitude.
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "kind": ["loss_plateau", "vanishing_gradient", "frozen_weights"],
    "layer": ["<optimizer>", "<loss>"],
    "step": (0, 60),
    "bug": "torch.nn.utils.clip_grad_value_(params, 1e-4) instead of clip_grad_norm_(params, 1.0)",
    "source": "PyTorch forum 'clip_grad_value_ vs clip_grad_norm_' / 'model not learning after "
              "gradient clipping' threads; Humbatova et al. ICSE 2020 'Optimiser' faults",
    "arch": "LSTM one-step-ahead forecaster on noisy sine mixtures, SGD momentum",
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(1, 32, batch_first=True)
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def batch(g, n=32):
    t0 = torch.rand(n, 1, generator=g) * 20
    f = 0.5 + torch.rand(n, 1, generator=g)
    t = t0 + 0.3 * torch.arange(25).float()
    s = 2.0 * torch.sin(f * t) + 1.0 + 0.05 * torch.randn(n, 25, generator=g)
    return s[:, :24, None], s[:, 24:]


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    crit = nn.MSELoss()
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit, grad_clip=1.0 if fixed else None)
    p = probe(model) if probe else None
    for _ in range(200):
        x, y = batch(g)
        loss = crit(model(x), y)
        opt.zero_grad()
        loss.backward()
        if fixed:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        else:
            torch.nn.utils.clip_grad_value_(model.parameters(), 1e-4)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    b0, b1 = mean([r["loss"] for r in bug[:10]]), mean([r["loss"] for r in bug[-20:]])
    t0, t1 = mean([r["loss"] for r in twin[:10]]), mean([r["loss"] for r in twin[-20:]])
    held = b1 > 0.6 * b0 and t1 < 0.15 * t0 and b1 > 4 * t1
    return held, f"loss first-10 -> last-20: bug {b0:.3g} -> {b1:.3g}, twin {t0:.3g} -> {t1:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
