"""A small causal LM fine-tuned on prompt/answer pairs; one batch has every label at ignore_index.

Bug: the loss is only on answer tokens (prompt tokens are -100). At step 60 a batch of long prompts
is truncated to the window before any answer token: every label is -100, and
``CrossEntropyLoss(reduction='mean')`` divides 0 by 0: the loss is NaN at that step (its gradient
is zero and the weights stay finite: one poisoned loss value, the epoch's mean loss NaN).
Source: https://github.com/pytorch/pytorch/issues/70348 and #116349 (CrossEntropyLoss is NaN when
all targets are ignore_index); https://github.com/OpenRLHF/OpenRLHF/pull/583 (SFT with all labels
masked).
Fixed twin: a batch with no supervised token is skipped (the usual guard).
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "a batch whose labels are all ignore_index (-100): CrossEntropyLoss mean is 0/0 = NaN at that step",
    "source": "https://github.com/pytorch/pytorch/issues/70348; https://github.com/OpenRLHF/OpenRLHF/pull/583",
    "arch": "GRU causal LM, prompt tokens masked from the loss",
    "kind": ["nonfinite"],
    "layer": ["<loss>"],
    "step": [60, 61],
}

V, T = 20, 16
BAD = 60


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 32)
        self.gru = nn.GRU(32, 64, batch_first=True)
        self.head = nn.Linear(64, V)

    def forward(self, x):
        return self.head(self.gru(self.emb(x))[0])


def batch(g, step):
    seq = torch.randint(0, V, (32, T + 1), generator=g)
    for t in range(T):  # a learnable next-token rule (prompt tokens stay random)
        if t >= 5:
            seq[:, t + 1] = (seq[:, t] * 3 + 1) % V
    x, y = seq[:, :-1], seq[:, 1:].clone()
    prompt = T if step == BAD else 6  # the long prompts fill the whole window
    y[:, :prompt] = -100
    return x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = LM()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss(ignore_index=-100)
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for step in range(150):
        x, y = batch(g, step)
        if fixed and bool((y == -100).all()):
            continue
        opt.zero_grad()
        loss = crit(model(x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    nan_steps = [i for i, r in enumerate(bug) if not math.isfinite(r["loss"])]
    tw_nan = sum(1 for r in twin if not math.isfinite(r["loss"]))
    l0, l1 = mean([r["loss"] for r in twin[:10]]), mean([r["loss"] for r in twin[-20:]])
    held = nan_steps[:1] == [BAD] and tw_nan == 0 and l1 < 0.5 * l0
    return held, (f"bug NaN loss at steps {nan_steps[:5]} (of {len(nan_steps)}), weights after: inp finite "
                  f"{all(math.isfinite(v) for v in bug[-1]['weight'].values())}; twin NaN steps {tw_nan}, loss {l0:.3g} -> {l1:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
