"""Healthy: a small transformer LM whose rate warms up linearly from 1e-7 over 80 steps, then cosine.

Fools: for the first steps the updates are ~1e-4 of the weights' usual update ratio (a "frozen"
look) and the loss is flat above ln V before it trains; then the cosine decay slows it again.
Source of the recipe: linear warmup + cosine decay as in transformers' get_cosine_schedule_with_warmup.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "lr warmup from 1e-7: tiny updates and a flat loss at the start",
        "source": "transformers get_cosine_schedule_with_warmup", "arch": "causal transformer LM (2 layers)"}


class LM(nn.Module):
    def __init__(self, vocab=24, d=32, t=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(t, d)
        layer = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(t))

    def forward(self, t):
        h = self.emb(t) + self.pos(torch.arange(t.shape[1]))
        return self.head(self.enc(h, mask=self.mask, is_causal=True))


def schedule(step, warm=80, total=250):
    if step < warm:
        return 1e-4 + (1 - 1e-4) * step / warm
    return 0.5 * (1 + math.cos(math.pi * (step - warm) / (total - warm)))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = LM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3 * 3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(250):
        start = torch.randint(0, 24, (32, 1), generator=g)
        seq = (start + torch.arange(17) * 3) % 24            # arithmetic sequences mod 24
        opt.zero_grad()
        loss = crit(model(seq[:, :-1]).reshape(-1, 24), seq[:, 1:].reshape(-1))
        loss.backward()
        if p:
            p.step(loss)
        opt.step()
        sched.step()


def truth(bug, twin):
    return loss_fell(bug, 0.3)


if __name__ == "__main__":
    sys.exit(main(globals()))
