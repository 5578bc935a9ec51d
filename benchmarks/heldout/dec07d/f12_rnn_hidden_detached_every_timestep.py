"""A GRUCell sequence classifier that detaches its hidden state at every time step.

Bug: meant as truncated BPTT, ``h = h.detach()`` sits inside the per-time-step loop, after the
cell call, so even the last state is detached before the head reads it: the cell and the
embedding get no gradient at all (the probe reads ``grad None`` on every step; the truth record
below, written before that was seen, expected only a one-step truncation) and only the head
trains, on the random features of an untrained cell. The label is the FIRST token of the
sequence; the loss stays at ln 4 while the twin learns.
Source: https://www.codegenes.net/blog/how-to-use-detach-in-hidden-state-loss-backward-pytorch
(recommends ``for i in range(sequence_length): output, hidden = rnn(input, hidden);
hidden = hidden.detach()``); Lightning's TBPTT docs detach between time SPLITS, not steps
(https://lightning.ai/docs/pytorch/stable/_sources/common/tbptt.rst.txt).
Fixed twin: no detach inside the sequence (each batch starts from a fresh zero state).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "hidden state detached inside the time-step loop: BPTT truncated to one step",
    "source": "https://www.codegenes.net/blog/how-to-use-detach-in-hidden-state-loss-backward-pytorch",
    "arch": "embedding + GRUCell unrolled over 10 steps + linear head (4 classes)",
    "kind": ["loss_plateau", "vanishing_gradient"],
    "layer": ["<loss>", "cell", "emb"],
    "step": [0, 150],
}

V, T = 4, 10


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed
        self.emb = nn.Embedding(V, 16)
        self.cell = nn.GRUCell(16, 48)
        self.head = nn.Linear(48, V)

    def forward(self, tok):
        h = torch.zeros(tok.size(0), 48)
        for t in range(tok.size(1)):
            h = self.cell(self.emb(tok[:, t]), h)
            if not self.fixed:
                h = h.detach()  # the misplaced truncation
        return self.head(h)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        tok = torch.randint(0, V, (64, T), generator=g)
        y = tok[:, 0]
        opt.zero_grad()
        loss = crit(model(tok), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = lb > 1.2 and lb > 3 * lt
    return held, f"last-30 loss bug {lb:.3g} twin {lt:.3g} (ln 4 = 1.39)"


if __name__ == "__main__":
    sys.exit(main(globals()))
