"""A transformer tagger whose optimizer.zero_grad() was moved above the loop: gradients pile up.

Bug: while adding gradient accumulation, ``optimizer.zero_grad()`` ended up before the epoch loop
and ``optimizer.step()`` runs every batch: ``.grad`` is the running sum of every gradient so far,
so each update is the sum of all past gradients (momentum without decay) and training oscillates
and degrades while the twin converges.
Source: gaozhihan/PreDiff PR #33 "Fix: gradient accumulation in VAE training ... Correct the timing
of calling opt.zero_grad()" (https://github.com/gaozhihan/PreDiff/pull/33); huggingface/accelerate
issue #616 "Gradient Accumulation Documentation has optimizer.zero_grad() at wrong step"
(https://github.com/huggingface/accelerate/issues/616).
Fixed twin: ``zero_grad()`` after every ``step()``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, ratio, series  # noqa: E402

CASE = {
    "bug": "zero_grad() above the training loop: .grad accumulates every batch's gradient forever",
    "source": "https://github.com/gaozhihan/PreDiff/pull/33; https://github.com/huggingface/accelerate/issues/616",
    "arch": "transformer token tagger (nn.TransformerEncoder, 2 layers)",
    "kind": ["exploding_gradient", "loss_spike", "nonfinite", "activation_explosion"],
    "layer": ["<optimizer>"],
    "step": [0, 30],
}


class Tagger(nn.Module):
    def __init__(self, vocab=40, d=32, tags=5):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, tags)

    def forward(self, t):
        return self.head(self.enc(self.emb(t)))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Tagger()
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    opt.zero_grad()
    for _ in range(200):
        t = torch.randint(0, 40, (16, 12), generator=g)
        y = (t % 5 + (t.roll(1, 1) > 20).long()) % 5
        loss = crit(model(t).reshape(-1, 5), y.reshape(-1))
        loss.backward()
        if p:
            p.step(loss)
        opt.step()
        if fixed:
            opt.zero_grad()


def truth(bug, twin):
    g = ratio(mean(series(bug[20:40], "grad", "head")), mean(series(twin[20:40], "grad", "head")))
    b, t = mean([r["loss"] for r in bug[-30:]]), mean([r["loss"] for r in twin[-30:]])
    held = g > 10 and (b != b or b > 2 * t)
    return held, f"head .grad norm steps 20-40 bug/twin {g:.3g}; last-30 loss bug {b:.3g} twin {t:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
