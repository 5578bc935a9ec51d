"""A GRU sequence tagger whose targets are flattened time-major while its logits are batch-major.

Bug: logits ``(B, T, C).reshape(-1, C)`` against targets stored ``(T, B)`` and flattened with
``.reshape(-1)``: the shapes agree (B*T) so nothing raises, but almost every position is scored
against another sequence's tag. The tagger can only learn the tag marginals; the loss stays near
their entropy while the twin's falls to ~0.
Source: Islam et al. FSE 2019, 'A comprehensive study on deep learning bug characteristics',
data-flow bugs from reshaping (wrong reshape that keeps the element count); Humbatova et al.
ICSE 2020 'Wrong tensor shape / misaligned labels'; Zhang et al. ISSTA 2018 'Incorrect Model
Parameter or Structure' / shape mismatch.
Fixed twin: targets transposed to ``(B, T)`` before flattening.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "tagger targets flattened time-major against batch-major logits: labels misaligned, loss stuck",
    "source": "Islam et al. FSE 2019 (data-flow / reshape bugs); Humbatova et al. ICSE 2020 (misaligned labels)",
    "arch": "embedding + bidirectional GRU + linear tag head (sequence tagging)",
    "kind": ["loss_plateau"],
    "layer": ["<loss>", "<input>"],
    "step": [0, 150],
}


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 24)
        self.gru = nn.GRU(24, 32, batch_first=True, bidirectional=True)
        self.head = nn.Linear(64, 5)

    def forward(self, x):
        return self.head(self.gru(self.emb(x))[0])


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Tagger()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randint(0, 30, (32, 20), generator=g)
        tags_tb = (x % 5).T.contiguous()  # the loader stores tags time-major (T, B)
        y = tags_tb.T if fixed else tags_tb
        opt.zero_grad()
        loss = crit(model(x).reshape(-1, 5), y.reshape(-1))
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = lb > 1.4 and lt < 0.1
    return held, f"last-30 loss bug {lb:.3g} (ln 5 = 1.609, the marginal entropy) twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
