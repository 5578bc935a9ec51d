"""A 1-D CNN text model with a hand-written mean-pool autograd.Function whose backward forgets 1/L.

Bug: ``MeanPool.backward`` returns ``grad.expand(...)`` without dividing by the sequence length
(L=256), so every gradient below the pool is 256 times too large; with plain SGD the convolutions
blow up within a few steps. ``torch.autograd.gradcheck`` would have caught it.
Source: pytorch/pytorch issue #4714 "Custom backward() not called" (a custom Function whose
backward scales the gradient, https://github.com/pytorch/pytorch/issues/4714) and the
"Extending torch.autograd" notes that recommend gradcheck; Humbatova et al. ICSE 2020,
Model > Layers > "Wrong layer implementation" (custom layers).
Fixed twin: the backward divides by L.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, ratio, series  # noqa: E402

CASE = {
    "bug": "custom autograd.Function mean-pool: backward forgets the 1/L factor (x256)",
    "source": "https://github.com/pytorch/pytorch/issues/4714; Humbatova et al. ICSE 2020 (custom layer)",
    "arch": "1-D CNN over token embeddings",
    "kind": ["exploding_gradient", "nonfinite", "loss_spike", "activation_explosion"],
    "layer": ["pool", "conv2"],
    "step": [0, 10],
}


class MeanPoolFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, fixed):
        ctx.length, ctx.fixed = x.shape[-1], fixed
        return x.mean(-1)

    @staticmethod
    def backward(ctx, grad):
        g = grad.unsqueeze(-1).expand(*grad.shape, ctx.length)
        return (g / ctx.length if ctx.fixed else g), None


class MeanPool(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed

    def forward(self, x):
        return MeanPoolFn.apply(x, self.fixed)


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.emb = nn.Embedding(100, 16)
        self.conv1 = nn.Conv1d(16, 32, 5, padding=2)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv1d(32, 32, 5, padding=2)
        self.act2 = nn.ReLU()
        self.pool = MeanPool(fixed)
        self.head = nn.Linear(32, 2)

    def forward(self, t):
        x = self.emb(t).transpose(1, 2)
        return self.head(self.pool(self.act2(self.conv2(self.act1(self.conv1(x))))))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net(fixed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("conv1", "conv2")) if probe else None
    for _ in range(150):
        t = torch.randint(10, 100, (16, 256), generator=g)
        y = torch.randint(0, 2, (16,), generator=g)
        spots = torch.randint(0, 256, (16, 32), generator=g)
        t[torch.arange(16).unsqueeze(1), spots] = torch.where(y.unsqueeze(1) == 1, 7, 3)  # the keyword
        opt.zero_grad()
        loss = crit(model(t), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    r0 = ratio(bug[0]["grad"]["conv2"], twin[0]["grad"]["conv2"])
    h0 = ratio(bug[0]["grad"]["head"], twin[0]["grad"]["head"])
    mb = mean(series(bug[:30], "act", "conv1", "maxabs"))
    mt = mean(series(twin[:30], "act", "conv1", "maxabs"))
    b, t = mean([r["loss"] for r in bug[-30:]]), mean([r["loss"] for r in twin[-30:]])
    held = 200 < r0 < 300 and abs(h0 - 1) < 1e-6 and mb > 10 * mt and t < 0.3 and (b != b or b > 2 * t)
    return held, (f"step 0 grad conv2 bug/twin {r0:.1f}, head {h0:.3f}; conv1 max|act| first 30 steps bug {mb:.3g} "
                  f"twin {mt:.3g}; last-30 loss bug {b:.3g} twin {t:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
