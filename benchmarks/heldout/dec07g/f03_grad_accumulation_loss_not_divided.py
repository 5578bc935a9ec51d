"""Gradient accumulation over 8 micro-batches without dividing the loss by 8.

The summed gradient is 8x the mean one, so SGD with momentum takes 8x the step its learning rate
was tuned for (tuned on the averaged gradient of the fixed twin): the 1-D conv audio classifier's
loss blows up within the first optimizer steps.
"""
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

ACCUM = 8

CASE = {
    "kind": ["exploding_gradient", "loss_spike", "nonfinite", "activation_explosion"],
    "layer": ["<optimizer>", "<loss>"],
    "step": (0, 25),
    "bug": "loss.backward() on each of 8 micro-batches without loss / 8: the step is 8x too large",
    "source": "fastai/fastai2 PR #194 (gradient accumulation: loss and gradients explode after a "
              "while); huggingface/transformers PR #35207 'Scale loss before backward'; HF "
              "accelerate gradient accumulation guide",
    "arch": "1-D conv audio classifier (synthetic tones), SGD momentum",
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(1, 16, 9, stride=2)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv1d(16, 32, 9, stride=2)
        self.act2 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.pool(self.act2(self.conv2(self.act1(self.conv1(x))))).flatten(1))


def batch(g, n=16):
    y = torch.randint(0, 4, (n,), generator=g)
    t = torch.arange(256).float() / 256
    freq = (3 + 4 * y).float()[:, None]
    phase = torch.rand(n, 1, generator=g) * 6.28
    x = torch.sin(6.28 * freq * t + phase) + 0.5 * torch.randn(n, 256, generator=g)
    return x[:, None, :], y


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.15, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(120):
        opt.zero_grad()
        total, correct = 0.0, 0.0
        for _ in range(ACCUM):
            x, y = batch(g)
            logits = model(x)
            loss = crit(logits, y)
            (loss / ACCUM if fixed else loss).backward()
            total += float(loss.detach()) / ACCUM
            correct += float((logits.argmax(1) == y).float().mean()) / ACCUM
        if p:
            p.step(torch.tensor(total), acc=correct)
        opt.step()


def truth(bug, twin):
    t0 = twin[0]["loss"]
    first = next((i for i, r in enumerate(bug) if not math.isfinite(r["loss"]) or r["loss"] > 5 * t0), None)
    acc_t = mean([r["acc"] for r in twin[-10:]])
    acc_b = mean([r["acc"] for r in bug[-10:]])
    held = first is not None and first <= 25 and acc_t > 0.8 and not acc_b > 0.5
    return held, (f"bug loss >5x its start or non-finite from optimizer step {first}; acc last-10 "
                  f"bug {acc_b:.2f} vs twin {acc_t:.2f}")


if __name__ == "__main__":
    sys.exit(main(globals()))
