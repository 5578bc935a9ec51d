"""Healthy: a small BERT-style masked language model, loss on the 15 % masked positions only.

Fools: 85 % of the targets are ignore_index (-100), so most output positions send no gradient;
the [MASK] row of the embedding is used on every step; the loss sits near ln V for ~120 steps
(a long plateau while attention learns to look at the neighbour) and only then falls.
Source of the recipe: Devlin et al., "BERT", NAACL 2019, sec. 3.1 (15 % masking, 80/10/10);
transformers' DataCollatorForLanguageModeling (labels -100 on unmasked positions).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "85 % of targets ignored (-100); ~120-step plateau near ln V before the loss falls",
        "source": "Devlin et al. 2019 sec. 3.1; transformers DataCollatorForLanguageModeling",
        "arch": "2-layer TransformerEncoder masked LM"}

V, T, D = 40, 32, 48
MASK = V - 1


class MLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Embedding(T, D)
        layer = nn.TransformerEncoderLayer(D, 4, 96, dropout=0.1, batch_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.out = nn.Linear(D, V)

    def forward(self, tok):
        return self.out(self.encoder(self.emb(tok) + self.pos(torch.arange(tok.size(1)))))


def sequences(g, n):
    # tokens come in repeated pairs (a, a+1 mod 39): a masked token is predictable from its neighbour
    a = torch.randint(0, MASK, (n, T // 2), generator=g)
    return torch.stack([a, (a + 1) % MASK], 2).reshape(n, T)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = MLM()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss(ignore_index=-100)
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(250):
        tok = sequences(g, 64)
        chosen = torch.rand(tok.shape, generator=g) < 0.15
        labels = torch.where(chosen, tok, torch.full_like(tok, -100))
        roll = torch.rand(tok.shape, generator=g)
        inp = tok.clone()
        inp[chosen & (roll < 0.8)] = MASK
        rand_tok = torch.randint(0, MASK, tok.shape, generator=g)
        swap = chosen & (roll >= 0.8) & (roll < 0.9)
        inp[swap] = rand_tok[swap]
        opt.zero_grad()
        loss = crit(model(inp).reshape(-1, V), labels.reshape(-1))
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.6)


if __name__ == "__main__":
    sys.exit(main(globals()))
