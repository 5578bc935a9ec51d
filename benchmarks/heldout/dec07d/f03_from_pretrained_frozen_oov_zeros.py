"""A bag-of-words classifier on "pretrained" vectors loaded with ``nn.Embedding.from_pretrained``.

Bug: words missing from the pretrained table are given zero vectors (a common recipe) and the
table is loaded with ``from_pretrained(weights)``, whose ``freeze`` defaults to True: the
embedding never receives a gradient, so the zero rows stay zero for ever. Most words that carry
the label are out of vocabulary here, so the model cannot see them and the loss stays far above
the twin's, which fine-tunes the table.
Source: PyTorch docs of nn.Embedding.from_pretrained ("freeze (bool, optional) - If True, the
tensor does not get updated in the learning process. Default: True",
https://pytorch.org/docs/stable/generated/torch.nn.Embedding.html#torch.nn.Embedding.from_pretrained);
the zero-vector OOV recipe as in
https://pexcera.com/learn/advanced-nlp/using-pre-trained-embeddings-in-pytorchkeras.html.
Fixed twin: ``from_pretrained(weights, freeze=False)``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "Embedding.from_pretrained with the default freeze=True; OOV rows zero, never trained",
    "source": "https://pytorch.org/docs/stable/generated/torch.nn.Embedding.html (from_pretrained freeze default True)",
    "arch": "frozen-by-mistake embedding + mean pooling + MLP text classifier (4 classes)",
    "kind": ["frozen_weights", "no_gradient"],
    "layer": ["emb"],
    "step": [0, 20],
}

V, D, L = 400, 32, 12


class Net(nn.Module):
    def __init__(self, table, fixed):
        super().__init__()
        self.emb = nn.Embedding.from_pretrained(table, freeze=False) if fixed else nn.Embedding.from_pretrained(table)
        self.mlp = nn.Sequential(nn.Linear(D, 64), nn.ReLU())
        self.head = nn.Linear(64, 4)

    def forward(self, tok):
        return self.head(self.mlp(self.emb(tok).mean(1)))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    table = 0.3 * torch.randn(V, D, generator=g)
    table[:300] = 0.0  # out-of-vocabulary words: zero vectors; the label words are among them
    word_class = torch.randint(0, 4, (V,), generator=g)
    model = Net(table, fixed)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        y = torch.randint(0, 4, (64,), generator=g)
        tok = torch.randint(0, V, (64, L), generator=g)
        # three label-bearing words per document, drawn from the OOV part of the vocabulary
        cands = torch.stack([(word_class[:300] == c).nonzero().squeeze(1)[:60] for c in range(4)])
        pick = torch.randint(0, 60, (64, 3), generator=g)
        tok[:, :3] = cands[y][torch.arange(64)[:, None], pick]
        opt.zero_grad()
        loss = crit(model(tok), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    gb = [r["grad"].get("emb") for r in bug]
    gt = mean([r["grad"].get("emb") for r in twin])
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = all(v is None for v in gb) and gt > 0 and lb > 1.0 and lb > 3 * lt
    return held, f"emb grad bug {set(gb)} twin mean {gt:.3g}; last-30 loss bug {lb:.3g} twin {lt:.3g} (ln 4 = 1.39)"


if __name__ == "__main__":
    sys.exit(main(globals()))
