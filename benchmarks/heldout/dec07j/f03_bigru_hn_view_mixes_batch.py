"""Bidirectional GRU classifier that flattens ``h_n`` with ``view(batch, -1)``: each row mixes two samples.

Bug: ``h_n`` is (num_directions, batch, hidden); ``h_n.view(batch, -1)`` (no permute) builds row i
from the states of samples 2i and 2i+1 of ONE direction, so the head sees features of the wrong
samples for every row but... half the information of its own sample at best; it learns much less
than the twin (held-out accuracy). Silent: every statistic is healthy.
Source: PyTorch forum "Concatenation of the hidden states produced by a bidirectional LSTM"
(https://discuss.pytorch.org/t/concatenation-of-the-hidden-states-produced-by-a-bidirectional-lstm/3686);
torch.nn.GRU docs on the shape of h_n.
Fixed twin: ``torch.cat([h_n[0], h_n[1]], dim=1)``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "bidirectional GRU h_n.view(batch, -1) without permute: the head reads other samples' states",
    "source": "https://discuss.pytorch.org/t/concatenation-of-the-hidden-states-produced-by-a-bidirectional-lstm/3686",
    "arch": "embedding + bidirectional GRU sequence classifier",
    "kind": ["loss_plateau", "activation_collapse"],
    "layer": ["<loss>", "gru", "head"],
    "step": [0, 60],
}


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed
        self.emb = nn.Embedding(12, 16)
        self.gru = nn.GRU(16, 24, batch_first=True, bidirectional=True)
        self.head = nn.Linear(48, 3)

    def forward(self, x):
        _, h = self.gru(self.emb(x))
        feats = torch.cat([h[0], h[1]], dim=1) if self.fixed else h.view(x.shape[0], -1)
        return self.head(feats)


def _batch(g, n):
    x = torch.randint(0, 12, (n, 14), generator=g)
    y = ((x == 3).sum(1) - (x == 7).sum(1)).sign() + 1  # 3 classes: more 3s, tie, more 7s
    return x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    xv, yv = _batch(g, 512)
    model = Net(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x, y = _batch(g, 64)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            with torch.no_grad():
                acc = float((model(xv).argmax(1) == yv).float().mean())
            p.step(loss, acc=acc)
        opt.step()


def truth(bug, twin):
    ab = sum(r["acc"] for r in bug[-10:]) / 10
    at = sum(r["acc"] for r in twin[-10:]) / 10
    lb = sum(r["loss"] for r in bug[-20:]) / 20
    lt = sum(r["loss"] for r in twin[-20:]) / 20
    held = at > ab + 0.2 and lb > 2 * lt
    return held, f"held-out acc last 10: bug {ab:.3f}, twin {at:.3f}; train loss last 20: bug {lb:.3g}, twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
