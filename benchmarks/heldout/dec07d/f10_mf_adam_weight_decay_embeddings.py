"""A matrix-factorisation recommender trained with Adam(weight_decay=0.01) on its embedding tables.

Bug: Adam's ``weight_decay`` adds ``0.01 * w`` to the gradient BEFORE Adam's normalisation. An
embedding row gets a data gradient only when its user or item is in the batch, and then a small
one (mean over the batch), so the decay term dominates and Adam moves every row toward zero at
about ``lr`` per step: the user and item factors collapse, the dot product goes to 0 and the
model predicts from the biases alone. The loss stays far above the twin's.
Source: StackOverflow question 59147986 ("matrix factorization ... the regularization was the only
change", Adam(lr=0.01, weight_decay=0.01), error 0.0017 -> 17.59), mirrored at
https://thinbug.com/q/59147986; Loshchilov & Hutter, "Decoupled Weight Decay Regularization",
ICLR 2019 (L2 in Adam is not weight decay).
Fixed twin: ``weight_decay=0`` (the factors are small and the data are plentiful).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "coupled L2 (Adam weight_decay=0.01) on sparse-gradient embedding tables: factors collapse to 0",
    "source": "StackOverflow 59147986 (https://thinbug.com/q/59147986)",
    "arch": "matrix factorisation (user/item embeddings + biases), MSE on ratings",
    "kind": ["activation_collapse", "loss_plateau", "vanishing_gradient"],
    "layer": ["user_emb", "item_emb", "<optimizer>", "<loss>"],
    "step": [0, 150],
}

U, I, K = 150, 120, 16


class MF(nn.Module):
    def __init__(self):
        super().__init__()
        self.user_emb = nn.Embedding(U, K)
        self.item_emb = nn.Embedding(I, K)
        self.user_bias = nn.Embedding(U, 1)
        self.item_bias = nn.Embedding(I, 1)
        nn.init.normal_(self.user_emb.weight, std=0.3)
        nn.init.normal_(self.item_emb.weight, std=0.3)
        nn.init.zeros_(self.user_bias.weight)
        nn.init.zeros_(self.item_bias.weight)

    def forward(self, u, i):
        dot = (self.user_emb(u) * self.item_emb(i)).sum(1)
        return dot + self.user_bias(u).squeeze(1) + self.item_bias(i).squeeze(1) + 3.5


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    pu = torch.randn(U, 4, generator=g) * 0.7
    qi = torch.randn(I, 4, generator=g) * 0.7
    model = MF()
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.0 if fixed else 0.01)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("user_emb",)) if probe else None
    for _ in range(200):
        u = torch.randint(0, U, (512,), generator=g)
        i = torch.randint(0, I, (512,), generator=g)
        r = (3.5 + (pu[u] * qi[i]).sum(1) + 0.2 * torch.randn(512, generator=g)).clamp(1, 5)
        opt.zero_grad()
        loss = crit(model(u, i), r)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    wb = bug[-1]["weight"]["user_emb"]
    wt = twin[-1]["weight"]["user_emb"]
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = wb < 0.1 * wt and lb > 2 * lt
    return held, f"user_emb weight norm at end bug {wb:.3g} twin {wt:.3g}; last-30 MSE bug {lb:.3g} twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
