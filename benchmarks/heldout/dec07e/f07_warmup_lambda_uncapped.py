"""A 1-D audio classifier whose linear warm-up never stops: LambdaLR(lambda s: s / warmup) has no cap.

Bug: the warm-up factor is ``step / warmup_steps`` with no ``min(1.0, ...)``: after the 5 warm-up
steps the learning rate keeps growing linearly (20x the base rate at step 100, 30x at step 150).
Training first goes well, then the rate crosses SGD's stability limit: the loss climbs back to
chance and the ReLU layers die (their gradients go to exactly 0).
Source: https://github.com/Adit-Jain-srm/NightmareNet/pull/158 (review: ``warmup_lambda`` returns
``current_step / warmup_steps`` with no cap, so the multiplier keeps increasing after warm-up);
https://github.com/pytorch/torchtitan/pull/1010 (warm-up lambdas and their boundaries).
Fixed twin: ``min(1.0, step / warmup_steps)``.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "LambdaLR warm-up factor step/warmup without min(1, .): lr grows 30x past the base rate, SGD falls apart",
    "source": "https://github.com/Adit-Jain-srm/NightmareNet/pull/158",
    "arch": "1-D conv audio classifier (4 tones in noise, 256 samples)",
    "kind": ["loss_spike", "exploding_gradient", "nonfinite", "activation_explosion", "dead_activation"],
    "layer": ["<optimizer>", "act1", "act2"],
    "step": [60, 130],
}

WARMUP = 5


class AudioNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(1, 16, 9, stride=2, padding=4)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv1d(16, 32, 9, stride=2, padding=4)
        self.act2 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.fc = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc(self.pool(self.act2(self.conv2(self.act1(self.conv1(x))))).flatten(1))


def batch(g, n=32):
    y = torch.randint(0, 4, (n,), generator=g)
    t = torch.arange(256.0)
    freq = (0.04 + 0.05 * y.float())[:, None]
    phase = torch.rand(n, 1, generator=g) * 2 * math.pi
    x = torch.sin(2 * math.pi * freq * t + phase) + 0.5 * torch.randn(n, 256, generator=g)
    flip = torch.rand(n, generator=g) < 0.25  # label noise keeps the gradients alive after the fit
    y = torch.where(flip, torch.randint(0, 4, (n,), generator=g), y)
    return x[:, None], y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = AudioNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if fixed:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / WARMUP))
    else:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / WARMUP)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        x, y = batch(g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss, lr=opt.param_groups[0]["lr"])
        opt.step()
        sched.step()


def truth(bug, twin):
    best = mean([r["loss"] for r in bug[25:40]])
    roll = [mean([r["loss"] for r in bug[i - 4:i + 1]]) for i in range(len(bug))]
    first_bad = next((i for i in range(40, len(bug)) if roll[i] > 1.3), None)
    lr_at = bug[first_bad]["lr"] if first_bad is not None else None
    gb = mean([r["grad"]["conv1"] for r in bug[-20:]])
    gt = mean([r["grad"]["conv1"] for r in twin[-20:]])
    lb = mean([r["loss"] for r in bug[-20:]])
    lt = mean([r["loss"] for r in twin[-20:]])
    held = best < 1.0 and first_bad is not None and 60 <= first_bad <= 130 and lb > 1.3 and lt < 1.0 \
        and gb < 1e-3 * gt
    return held, (f"bug mean loss steps 25-39 {best:.3g}; 5-step mean loss first >1.3 (chance ln4) at step "
                  f"{first_bad} (lr {lr_at:.3g}); last-20 loss bug {lb:.3g} twin {lt:.3g}; last-20 conv1 grad "
                  f"bug {gb:.3g} twin {gt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
