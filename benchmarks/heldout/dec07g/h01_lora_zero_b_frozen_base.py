"""LoRA fine-tuning of a frozen pretrained MLP: adapters with B = 0, so A gets no gradient at first.

Healthy, built to fool: the base weights are frozen on purpose (no gradient, no update), the LoRA
B matrices start at exactly zero so the A matrices' gradient is exactly zero at step 0, and the
adapters' updates are large relative to their tiny weights. The loss on the new task falls.
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {"healthy": True, "arch": "3-layer MLP + LoRA rank 4 on two layers, new head",
        "fools": "frozen base, zero-init B (A's gradient exactly 0 at step 0), big relative updates"}


class LoRALinear(nn.Module):
    def __init__(self, base, r=4):
        super().__init__()
        self.base = base
        self.lora_a = nn.Parameter(torch.randn(r, base.in_features) / base.in_features ** 0.5)
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, r))

    def forward(self, x):
        return self.base(x) + (x @ self.lora_a.t()) @ self.lora_b.t() * 2.0


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.a1 = nn.Linear(32, 128), nn.ReLU()
        self.l2, self.a2 = nn.Linear(128, 128), nn.ReLU()
        self.head = nn.Linear(128, 4)

    def forward(self, x):
        return self.head(self.a2(self.l2(self.a1(self.l1(x)))))


def task(seed, g, n=64):
    protos = torch.randn(4, 32, generator=torch.Generator().manual_seed(seed))
    y = torch.randint(0, 4, (n,), generator=g)
    return protos[y] + torch.randn(n, 32, generator=g), y


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = Net()
    crit = nn.CrossEntropyLoss()
    pre = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(150):  # pretraining on task A, before any monitoring
        x, y = task(10, g)
        pre.zero_grad()
        crit(model(x), y).backward()
        pre.step()
    for prm in model.parameters():
        prm.requires_grad_(False)
    model.l1 = LoRALinear(model.l1)
    model.l2 = LoRALinear(model.l2)
    model.head = nn.Linear(128, 4)
    trainable = [prm for prm in model.parameters() if prm.requires_grad]
    opt = torch.optim.Adam(trainable, lr=3e-3)
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x, y = task(20, g)
        logits = model(x)
        loss = crit(logits, y)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss, acc=float((logits.argmax(1) == y).float().mean()))
        opt.step()


def truth(bug, twin):
    ok, detail = loss_fell(bug, 0.3)
    acc = mean([r["acc"] for r in bug[-20:]])
    return ok and acc > 0.85, f"{detail}; acc last-20 {acc:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
