"""A GRU text classifier whose linear-decay schedule is given one epoch as its total step count.

Bug: ``get_linear_schedule_with_warmup(opt, num_warmup_steps, num_training_steps)`` is built with
``num_training_steps = len(loader)`` (the steps of ONE epoch) while the loop runs four epochs:
the learning-rate multiplier reaches 0 at the end of epoch 1 (step 50) and stays 0, so every
weight stops moving there while the loss is still well above what the twin reaches.
Source: https://github.com/deepset-ai/FARM/issues/46 (wrong total steps: "Training beyond
specified 't_total'. Learning rate multiplier set to 0"); the schedule's formula is that of
transformers' get_linear_schedule_with_warmup (written out here as a LambdaLR to keep the case light).
Fixed twin: ``num_training_steps = epochs * len(loader)``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "linear warmup/decay schedule given the steps of one epoch as the total: lr 0 from step 50 of 200",
    "source": "https://github.com/deepset-ai/FARM/issues/46",
    "arch": "embedding + GRU text classifier (2 classes), AdamW + linear schedule",
    "kind": ["frozen_weights", "loss_plateau", "vanishing_gradient"],
    "layer": ["<optimizer>", "emb", "gru", "head"],
    "step": [45, 70],
}

V, L, EPOCHS, PER_EPOCH = 50, 20, 4, 50


def linear_schedule(opt, warmup, total):
    def mult(step):
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))
    return torch.optim.lr_scheduler.LambdaLR(opt, mult)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 16)
        self.gru = nn.GRU(16, 32, batch_first=True)
        self.head = nn.Linear(32, 2)

    def forward(self, tok):
        _, h = self.gru(self.emb(tok))
        return self.head(h[-1])


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    tok = torch.randint(0, V, (PER_EPOCH * 32, L), generator=g)
    y = ((tok == 3).float().sum(1) > (tok == 7).float().sum(1)).long()  # count comparison of two words
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sched = linear_schedule(opt, 5, EPOCHS * PER_EPOCH if fixed else PER_EPOCH)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(EPOCHS):
        order = torch.randperm(len(tok), generator=g)
        for i in range(PER_EPOCH):
            idx = order[i * 32:(i + 1) * 32]
            opt.zero_grad()
            loss = crit(model(tok[idx]), y[idx])
            loss.backward()
            if p:
                p.step(loss, lr=opt.param_groups[0]["lr"])
            opt.step()
            sched.step()


def truth(bug, twin):
    lr_zero = [i for i, r in enumerate(bug) if r["lr"] == 0.0 and i > 5]  # step 0 is 0 in both (warmup)
    wb = [r["weight"]["head"] for r in bug]
    moved_after = max(abs(w - wb[55]) for w in wb[55:])
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = lr_zero and lr_zero[0] == 50 and moved_after == 0.0 and lb > 1.5 * lt
    return held, (f"bug lr 0 from step {lr_zero[0] if lr_zero else None}, head weight moved after 55: "
                  f"{moved_after:.3g}; last-30 loss bug {lb:.3g} twin {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
