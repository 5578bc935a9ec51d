"""A small transformer whose LambdaLR warmup returns a learning rate instead of a factor.

Bug: ``LambdaLR(opt, lambda s: 1e-3 * min(1, (s + 1) / 50))`` on an Adam built with lr=1e-3:
LambdaLR multiplies the base rate by what the lambda returns, so the rate is 1e-3 * 1e-3 = 1e-6
and the model barely moves.
Source: the LambdaLR contract ("Sets the learning rate of each parameter group to the initial lr
times a given function", https://pytorch.org/docs/stable/generated/torch.optim.lr_scheduler.LambdaLR.html);
Humbatova et al. ICSE 2020, Training > Hyperparameters > "Suboptimal learning rate".
Fixed twin: the lambda returns the factor ``min(1, (s + 1) / 50)``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, ratio  # noqa: E402

CASE = {
    "bug": "LambdaLR lambda returns an absolute lr (1e-3 * warmup): effective lr 1e-6",
    "source": "https://pytorch.org/docs/stable/generated/torch.optim.lr_scheduler.LambdaLR.html; Humbatova et al. ICSE 2020",
    "arch": "transformer encoder (nn.TransformerEncoderLayer x2)",
    "kind": ["frozen_weights", "loss_plateau", "vanishing_gradient"],
    "layer": ["<optimizer>"],
    "step": [0, 60],
}


class Tiny(nn.Module):
    def __init__(self, vocab=32, d=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, 16, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, t):
        return self.head(self.enc(self.emb(t) + self.pos))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Tiny()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    if fixed:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))
    else:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1e-3 * min(1.0, (s + 1) / 50))
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(250):
        t = torch.randint(0, 32, (16, 16), generator=g)
        y = (t // 4 + 8 * (t.roll(1, 1) % 2)) % 32  # own group, and parity of the token before
        opt.zero_grad()
        loss = crit(model(t).reshape(-1, 32), y.reshape(-1))
        loss.backward()
        if p:
            p.step(loss, lr=opt.param_groups[0]["lr"])
        opt.step()
        sched.step()


def truth(bug, twin):
    lr = ratio(bug[100]["lr"], twin[100]["lr"])
    b, t = mean([r["loss"] for r in bug[-20:]]), mean([r["loss"] for r in twin[-20:]])
    drop_b = bug[0]["loss"] - b
    drop_t = twin[0]["loss"] - t
    held = lr <= 1.01e-3 and drop_b < 0.02 * drop_t
    return held, f"lr bug/twin {lr:.1e}; loss drop over the run bug {drop_b:.3g} twin {drop_t:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
