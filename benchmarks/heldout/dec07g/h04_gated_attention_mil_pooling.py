"""Multiple-instance learning with gated attention pooling (Ilse et al. 2018).

Healthy, built to fool: a bag is positive when one of its 32 instances is a "key" instance, so the
attention softmax puts nearly all weight on one instance (median max weight 0.996 on positive
bags) and ~0 on the rest, so most instances get almost no gradient, and the bag loss is noisy.
It learns.
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {"healthy": True, "arch": "instance MLP + gated attention pooling + bag classifier",
        "fools": "attention ~one-hot over instances (most get ~no gradient), noisy bag loss"}


class GatedAttention(nn.Module):
    def __init__(self, d, h=32):
        super().__init__()
        self.v = nn.Linear(d, h)
        self.u = nn.Linear(d, h)
        self.w = nn.Linear(h, 1)

    def forward(self, hs):  # hs: (bags, instances, d)
        a = self.w(torch.tanh(self.v(hs)) * torch.sigmoid(self.u(hs))).squeeze(-1)
        a = torch.softmax(a, dim=1)
        return (a.unsqueeze(-1) * hs).sum(1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inst = nn.Linear(10, 64)
        self.inst_act = nn.ReLU()
        self.pool = GatedAttention(64)
        self.head = nn.Linear(64, 1)

    def forward(self, x):
        return self.head(self.pool(self.inst_act(self.inst(x))))


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    key = torch.randn(10, generator=torch.Generator().manual_seed(8)) * 1.5
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.BCEWithLogitsLoss()
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(250):
        x = torch.randn(16, 32, 10, generator=g)
        y = (torch.rand(16, generator=g) < 0.5).float()
        pos = torch.randint(0, 32, (16,), generator=g)
        for b in range(16):
            if y[b] > 0:
                x[b, pos[b]] = key + 0.3 * torch.randn(10, generator=g)
        out = model(x)
        loss = crit(out.squeeze(1), y)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss, acc=float(((out.squeeze(1) > 0).float() == y).float().mean()))
        opt.step()


def truth(bug, twin):
    ok, detail = loss_fell(bug, 0.5)
    acc = mean([r["acc"] for r in bug[-30:]])
    return ok and acc > 0.85, f"{detail}; bag acc last-30 {acc:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
