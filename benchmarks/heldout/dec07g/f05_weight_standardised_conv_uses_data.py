"""A weight-standardised convolution computes its standardised kernel from self.weight.data.

`.data` leaves autograd: the standardised kernel is a constant, so the conv (no bias, as usual
before GroupNorm) gets no gradient at all and keeps its random init, while the rest of the small
CNN trains around a frozen random feature layer.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, series  # noqa: E402

CASE = {
    "kind": ["no_gradient", "frozen_weights"],
    "layer": ["conv2"],
    "step": (0, 5),
    "bug": "w = (self.weight.data - mean) / std in a WSConv2d: the kernel is cut from the graph",
    "source": "PyTorch forum (albanD, 'The principle of autograd': changes through .data are not "
              "tracked); PyTorch 0.4 release notes on .data vs .detach(); weight standardisation "
              "(Qiao et al. 2019) re-implementations",
    "arch": "small CNN with weight-standardised conv + GroupNorm, 4-class patterns",
}


class WSConv2d(nn.Conv2d):
    def __init__(self, *a, fixed=True, **k):
        super().__init__(*a, bias=False, **k)
        self.fixed = fixed

    def forward(self, x):
        w = self.weight if self.fixed else self.weight.data
        w = (w - w.mean(dim=(1, 2, 3), keepdim=True)) / (w.std(dim=(1, 2, 3), keepdim=True) + 1e-5)
        return F.conv2d(x, w, None, self.stride, self.padding)


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = WSConv2d(8, 16, 3, padding=1, fixed=fixed)
        self.norm2 = nn.GroupNorm(4, 16)
        self.act2 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        h = self.act2(self.norm2(self.conv2(self.act1(self.conv1(x)))))
        return self.head(self.pool(h).flatten(1))


def batch(g, n=32):
    y = torch.randint(0, 4, (n,), generator=g)
    x = 0.3 * torch.randn(n, 1, 12, 12, generator=g)
    for i in range(n):
        c = int(y[i])
        if c == 0:
            x[i, 0, 2:10, 5:7] += 1.0
        elif c == 1:
            x[i, 0, 5:7, 2:10] += 1.0
        elif c == 2:
            x[i, 0, range(2, 10), range(2, 10)] += 1.0
        else:
            x[i, 0, 3:9, 3:9] += 0.4
    return x, y


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = Net(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        x, y = batch(g)
        logits = model(x)
        loss = crit(logits, y)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss, acc=float((logits.argmax(1) == y).float().mean()))
        opt.step()


def truth(bug, twin):
    gb = series(bug, "grad", "conv2")
    gt = series(twin, "grad", "conv2")
    w = series(bug, "weight", "conv2")
    none_b = all(v is None for v in gb)
    t_ok = all(v is not None and v > 0 for v in gt)
    same_w = abs(w[0] - w[-1]) < 1e-9
    held = none_b and t_ok and same_w
    return held, (f"conv2 grad None at every bug step {none_b}, twin grads >0 {t_ok}; bug conv2 weight "
                  f"norm unchanged {same_w}; acc last-20 bug {mean([r['acc'] for r in bug[-20:]]):.2f} "
                  f"twin {mean([r['acc'] for r in twin[-20:]]):.2f}")


if __name__ == "__main__":
    sys.exit(main(globals()))
