"""Token tagger whose padding id is 0 and whose loss ignores index 0, but 0 is also the majority tag "O".

Bug: ``CrossEntropyLoss(ignore_index=0)`` where tag 0 ("O", ~70 % of the tokens) is a real tag:
the model never gets a gradient for it, learns to put every token in an entity tag, and its
token accuracy on held-out sentences stays far below the twin's while its training loss falls
normally. Silent: every statistic is healthy.
Source: Hugging Face transformers token-classification examples (labels of padding set to -100,
the default ignore_index, so no real tag is ignored); PyTorch docs of CrossEntropyLoss's
``ignore_index`` (https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html).
Fixed twin: padding labelled -100 and the default ``ignore_index``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "ignore_index=0 while tag 0 ('O', 70% of tokens) is real: the tagger never learns 'O'",
    "source": "https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html; HF token-classification (-100 labels)",
    "arch": "embedding + 1-D conv + linear token tagger (NER-like)",
    "kind": ["data_anomaly", "loss_plateau", "activation_collapse"],
    "layer": ["<loss>", "<input>"],
    "step": [0, 60],
}

V, K, T = 40, 4, 16


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 24)
        self.conv = nn.Conv1d(24, 32, 3, padding=1)
        self.out = nn.Linear(32, K)

    def forward(self, x):
        h = torch.relu(self.conv(self.emb(x).transpose(1, 2))).transpose(1, 2)
        return self.out(h)


def _batch(g, n, tag_of):
    x = torch.randint(1, V, (n, T), generator=g)
    y = tag_of[x]
    lens = torch.randint(8, T + 1, (n,), generator=g)
    pad = torch.arange(T).view(1, -1) >= lens.view(-1, 1)
    return x.masked_fill(pad, 0), y, pad


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    tag_of = torch.zeros(V, dtype=torch.long)
    tag_of[1:13] = torch.arange(12) % 3 + 1  # 12 of 39 words are entities: ~70 % of tokens are "O" (0)
    xv, yv, padv = _batch(g, 256, tag_of)
    model = Tagger()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss() if fixed else nn.CrossEntropyLoss(ignore_index=0)
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(160):
        x, y, pad = _batch(g, 64, tag_of)
        y = y.masked_fill(pad, -100) if fixed else y.masked_fill(pad, 0)
        opt.zero_grad()
        loss = crit(model(x).reshape(-1, K), y.reshape(-1))
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            with torch.no_grad():
                acc = float((model(xv).argmax(-1) == yv)[~padv].float().mean())
            p.step(loss, acc=acc)
        opt.step()


def truth(bug, twin):
    ab = sum(r["acc"] for r in bug[-10:]) / 10
    at = sum(r["acc"] for r in twin[-10:]) / 10
    held = at > 0.95 and ab < 0.5
    return held, f"held-out token acc last 10: bug {ab:.3f}, twin {at:.3f}; bug train loss last {bug[-1]['loss']:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
