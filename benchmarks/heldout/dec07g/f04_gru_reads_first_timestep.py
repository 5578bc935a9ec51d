"""A GRU classifier reads out[:, 0] (the first time step) instead of out[:, -1].

With batch_first=True, out[:, 0] is the hidden state after the first token only: it has never
seen the rest of the sequence, and the label depends on the last tokens. The recurrent weights
get no gradient at all (h0 is zero), the head only sees token 0, and the loss sits at ln 4.
"""
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "kind": ["loss_plateau", "no_gradient"],
    "layer": ["<loss>", "gru"],
    "step": (0, 40),
    "bug": "logits = head(out[:, 0]) with batch_first=True: the first step's state, not the last",
    "source": "PyTorch forum 'LSTM: output[-1] vs output[:, -1]' / 'many-to-one LSTM takes wrong "
              "time step' threads; Islam et al. FSE 2019 (wrong tensor shape / indexing in RNN "
              "models)",
    "arch": "embedding + 1-layer GRU sequence classifier",
}


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed
        self.emb = nn.Embedding(16, 32)
        self.gru = nn.GRU(32, 64, batch_first=True)
        self.head = nn.Linear(64, 4)

    def forward(self, tokens):
        out, _ = self.gru(self.emb(tokens))
        return self.head(out[:, -1] if self.fixed else out[:, 0])


def batch(g, n=64):
    tokens = torch.randint(0, 16, (n, 20), generator=g)
    y = (tokens[:, -1] + tokens[:, -2]) % 4
    return tokens, y


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = Net(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    crit = nn.CrossEntropyLoss()
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x, y = batch(g)
        logits = model(x)
        loss = crit(logits, y)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss, whh=float(model.gru.weight_hh_l0.grad.norm()),
                   acc=float((logits.argmax(1) == y).float().mean()))
        opt.step()


def truth(bug, twin):
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    whh_b = max(r["whh"] for r in bug)
    whh_t = mean([r["whh"] for r in twin])
    held = abs(lb - math.log(4)) < 0.05 and lt < 0.5 * lb and whh_b == 0.0 and whh_t > 0
    return held, (f"loss last-30 bug {lb:.3f} (ln4 {math.log(4):.3f}) vs twin {lt:.3f}; GRU weight_hh "
                  f"grad max bug {whh_b:.3g} vs twin mean {whh_t:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
