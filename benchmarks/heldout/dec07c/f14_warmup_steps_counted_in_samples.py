"""A small transformer classifier whose linear warmup length was computed in samples, not steps.

Bug: ``num_warmup_steps = int(0.1 * len(dataset) * epochs)`` (10 % of the *samples*, meant 10 % of
the optimizer steps) makes the warmup 1280 steps, 6.4x the whole run: the rate climbs from 0 and
reaches only 15.5 % of its peak (1.55e-4 for Adam at 1e-3) at the last step, ~8 % on average, so
the model moves far less than planned and its loss ends several times the twin's.
Source: https://github.com/wri-dssg-omdena/policy-data-analyzer/pull/76 ("Correcting warmup steps
expression, 10% of total training steps now"); https://github.com/deepset-ai/FARM/issues/46 (a
schedule's total steps computed wrongly); transformers get_linear_schedule_with_warmup docs.
Fixed twin: ``num_warmup_steps = int(0.1 * total_steps)``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

STEPS, BATCH = 200, 64

CASE = {
    "bug": "linear warmup length computed in samples (0.1 * samples) instead of steps: lr <= 15.5% of peak all run",
    "source": "https://github.com/wri-dssg-omdena/policy-data-analyzer/pull/76; https://github.com/deepset-ai/FARM/issues/46",
    "arch": "token embedding + 2 TransformerEncoderLayers + mean pool + linear, binary",
    "kind": ["frozen_weights", "loss_plateau", "vanishing_gradient"],
    "layer": ["<optimizer>", "<loss>"],
    "step": [0, 100],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        return self.head(self.encoder(self.emb(x)).mean(1))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    warmup = int(0.1 * STEPS) if fixed else int(0.1 * STEPS * BATCH)

    def factor(step):  # transformers.get_linear_schedule_with_warmup, written out
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (STEPS - step) / max(1, STEPS - warmup))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(STEPS):
        x = torch.randint(0, 30, (BATCH, 10), generator=g)
        y = ((x == 3).any(1) & (x == 7).any(1) | (x < 2).sum(1).gt(1)).long()
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss, lr=opt.param_groups[0]["lr"])
        opt.step()
        sched.step()


def truth(bug, twin):
    lrb = max(r["lr"] for r in bug)
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = lrb < 2e-4 and lb > 3 * lt
    return held, f"bug peak lr {lrb:.3g}; last-30 loss bug {lb:.3g} twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
