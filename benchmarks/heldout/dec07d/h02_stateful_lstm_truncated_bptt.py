"""Healthy: a character-level LSTM language model with truncated BPTT over one long stream.

Fools: the hidden state is carried (detached) from batch to batch, so consecutive steps are
strongly correlated and the activations never start from zero after the first step; the loss
starts at ln V and falls slowly with bumps; the gradient only ever reaches 16 steps back.
Source of the recipe: the PyTorch word_language_model example (repackage_hidden,
https://github.com/pytorch/examples/tree/main/word_language_model); Zaremba et al. 2014.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "hidden state carried across batches (detached); correlated consecutive steps",
        "source": "https://github.com/pytorch/examples/tree/main/word_language_model",
        "arch": "2-layer LSTM LM, TBPTT 16"}

V, B, BPTT = 27, 16, 16


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 32)
        self.lstm = nn.LSTM(32, 64, 2, batch_first=True)
        self.head = nn.Linear(64, V)

    def forward(self, x, state):
        out, state = self.lstm(self.emb(x), state)
        return self.head(out), state


def stream(g, n):
    words = [torch.randint(1, V, (int(k),), generator=g) for k in torch.randint(2, 7, (60,), generator=g)]
    pick = torch.randint(0, len(words), (n,), generator=g)
    return torch.cat([torch.cat([words[i], torch.zeros(1, dtype=torch.long)]) for i in pick.tolist()])


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    data = stream(g, 3000)
    cols = len(data) // B
    data = data[: cols * B].view(B, cols)
    model = LM()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    state = None
    for k in range(200):
        i = (k * BPTT) % (cols - BPTT - 1)
        x, y = data[:, i:i + BPTT], data[:, i + 1:i + BPTT + 1]
        if state is not None:
            state = tuple(s.detach() for s in state)
        opt.zero_grad()
        out, state = model(x, state)
        loss = crit(out.reshape(-1, V), y.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.75)


if __name__ == "__main__":
    sys.exit(main(globals()))
