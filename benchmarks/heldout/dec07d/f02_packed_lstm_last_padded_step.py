"""A packed-sequence LSTM classifier that reads ``out[:, -1]`` after ``pad_packed_sequence``.

Bug: with right-padded variable-length sequences, ``pad_packed_sequence`` fills the steps past each
sequence's length with zeros, so ``out[:, -1]`` is the zero vector for every sequence shorter than
the batch's longest: the head sees zeros for almost all samples and the LSTM gets gradient only
through the longest ones. The label (which of 3 features is largest at the LAST real step) is
then invisible for most samples: the loss stays near ln 3. Nothing raises.
Source: https://stackoverflow.com/questions/51030782/why-do-we-pack-the-sequences-in-pytorch
(the padded output is zero past each length); AllenNLP's PytorchSeq2VecWrapper takes the final
hidden state instead (https://allenai.github.io/allennlp-docs/api/modules/seq2vec_encoders/pytorch_seq2vec_wrapper/).
Fixed twin: the head reads ``h_n[-1]``, the state at each sequence's own last step.
"""

import os
import sys

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "out[:, -1] of pad_packed_sequence output: zero vector for every shorter sequence",
    "source": "https://stackoverflow.com/questions/51030782/why-do-we-pack-the-sequences-in-pytorch",
    "arch": "packed LSTM sequence classifier (3 classes) + linear head",
    "kind": ["loss_plateau", "vanishing_gradient"],
    "layer": ["<loss>", "lstm", "head"],
    "step": [0, 150],
}

T = 24


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed
        self.lstm = nn.LSTM(3, 32, batch_first=True)
        self.head = nn.Linear(32, 3)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, (h, _) = self.lstm(packed)
        if self.fixed:
            return self.head(h[-1])
        out, _ = pad_packed_sequence(out, batch_first=True)
        return self.head(out[:, -1])


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        lengths = torch.randint(4, T + 1, (64,), generator=g)
        x = torch.randn(64, T, 3, generator=g)
        steps = torch.arange(T)[None, :, None]
        x = x * (steps < lengths[:, None, None])  # right padding with zeros
        y = x[torch.arange(64), lengths - 1].argmax(1)
        opt.zero_grad()
        loss = crit(model(x, lengths), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = lb > 0.9 and lb > 2 * lt
    return held, f"last-30 loss bug {lb:.3g} twin {lt:.3g} (ln 3 = 1.10)"


if __name__ == "__main__":
    sys.exit(main(globals()))
