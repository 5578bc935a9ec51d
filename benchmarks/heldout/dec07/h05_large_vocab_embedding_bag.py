"""Healthy: an EmbeddingBag text classifier over a 20,000-word vocabulary with integer token input.

Fools: the input is integer ids (its "statistics" are in the thousands), and each step only a few
hundred of the 20,000 embedding rows receive a gradient, so the table's gradient norm and update
ratio are tiny and the rest of it never moves: a normal sparse-feature model.
Source of the recipe: the PyTorch text classification tutorial (nn.EmbeddingBag over AG_NEWS,
https://pytorch.org/tutorials/beginner/text_sentiment_ngrams_tutorial.html).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "integer token ids as input; 20k-row embedding with ~1% rows updated per step",
        "source": "https://pytorch.org/tutorials/beginner/text_sentiment_ngrams_tutorial.html",
        "arch": "EmbeddingBag + linear classifier"}


class Net(nn.Module):
    def __init__(self, vocab=20000, d=32):
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab, d, mode="mean")
        self.fc = nn.Linear(d, 4)

    def forward(self, tokens):
        return self.fc(self.bag(tokens))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    topic_words = torch.randint(0, 20000, (4, 50), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=5.0)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(250):
        y = torch.randint(0, 4, (32,), generator=g)
        filler = torch.randint(0, 20000, (32, 16), generator=g)
        topical = topic_words[y][torch.arange(32).unsqueeze(1), torch.randint(0, 50, (32, 8), generator=g)]
        tokens = torch.cat([filler, topical], 1)
        opt.zero_grad()
        loss = crit(model(tokens), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.5)


if __name__ == "__main__":
    sys.exit(main(globals()))
