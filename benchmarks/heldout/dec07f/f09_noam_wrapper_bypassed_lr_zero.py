"""A transformer frame classifier trained through a Noam warmup wrapper whose rate is never set.

Bug: the inner Adam is built with ``lr=0`` (as in the Annotated Transformer's NoamOpt: the wrapper
sets the rate before each step). The loop calls ``opt.optimizer.step()`` instead of
``opt.step()``: the wrapper never runs, the rate stays 0, no weight ever moves.
Source: https://github.com/gentaiscool/end2end-asr-pytorch/issues/4 ("opt.optimizer.step() ->
opt.step()"); the NoamOpt of https://nlp.seas.harvard.edu/2018/04/03/attention.html.
Fixed twin: ``opt.step()``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "Noam warmup wrapper bypassed (opt.optimizer.step()): the inner Adam keeps lr=0, nothing moves",
    "source": "https://github.com/gentaiscool/end2end-asr-pytorch/issues/4; Annotated Transformer NoamOpt",
    "arch": "transformer encoder frame classifier over 1-D features (ASR-like)",
    "kind": ["frozen_weights", "loss_plateau", "vanishing_gradient"],
    "layer": ["<optimizer>"],
    "step": [0, 5],
}

D, F, K = 32, 8, 5


class NoamOpt:
    """The wrapper: sets the Noam rate on the inner optimizer, then steps it."""

    def __init__(self, model_size, factor, warmup, optimizer):
        self.optimizer, self._step = optimizer, 0
        self.factor, self.model_size, self.warmup = factor, model_size, warmup

    def step(self):
        self._step += 1
        rate = self.factor * self.model_size ** -0.5 * min(self._step ** -0.5, self._step * self.warmup ** -1.5)
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        self.optimizer.step()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(F, D)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, 4, 64, dropout=0.0, batch_first=True), 2)
        self.head = nn.Linear(D, K)

    def forward(self, x):
        return self.head(self.enc(self.inp(x)))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    proto = torch.randn(K, F, generator=g)
    opt = NoamOpt(D, 2.0, 30, torch.optim.Adam(model.parameters(), lr=0, betas=(0.9, 0.98), eps=1e-9))
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt.optimizer, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        y = torch.randint(0, K, (16, 20), generator=g)
        x = proto[y] + 0.8 * torch.randn(16, 20, F, generator=g)
        opt.optimizer.zero_grad()
        loss = crit(model(x).reshape(-1, K), y.reshape(-1))
        loss.backward()
        if p:
            p.step(loss, lr=opt.optimizer.param_groups[0]["lr"])
        if fixed:
            opt.step()
        else:
            opt.optimizer.step()


def truth(bug, twin):
    moved = abs(bug[-1]["weight"]["head"] - bug[0]["weight"]["head"])
    moved_t = abs(twin[-1]["weight"]["head"] - twin[0]["weight"]["head"])
    g = mean([r["grad"]["head"] for r in bug])
    lb, lt = mean([r["loss"] for r in bug[-30:]]), mean([r["loss"] for r in twin[-30:]])
    held = moved == 0 and moved_t > 0.1 and g > 1e-3 and max(r["lr"] for r in bug) == 0 and lt < 0.5 * lb
    return held, (f"bug lr max {max(r['lr'] for r in bug)}, head weight-norm change bug {moved:.3g} twin {moved_t:.3g} "
                  f"(bug head grad mean {g:.3g}); last-30 loss bug {lb:.3g} twin {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
