"""Healthy: an implicit-feedback recommender trained with BPR on Zipf-distributed item popularity.

Fools: the BPR loss starts at ln 2 and its floor is far from 0; item popularity follows a Zipf
law, so most rows of the item table get a gradient on few steps (many rows are zero-gradient on
every step) while the head items are updated constantly; sampled negatives make the loss noisy.
Source of the recipe: Rendle et al., "BPR: Bayesian Personalized Ranking from Implicit
Feedback", UAI 2009; popularity-skewed item distributions as in MovieLens.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "Zipf item popularity: most item rows idle on most steps; BPR loss floor far above 0",
        "source": "Rendle et al. UAI 2009 (BPR)", "arch": "user/item embeddings, dot-product scores, BPR loss"}

U, I, K = 300, 1000, 16


class MF(nn.Module):
    def __init__(self):
        super().__init__()
        self.users = nn.Embedding(U, K)
        self.items = nn.Embedding(I, K)
        nn.init.normal_(self.users.weight, std=0.1)
        nn.init.normal_(self.items.weight, std=0.1)

    def forward(self, u, i):
        return (self.users(u) * self.items(i)).sum(1)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    pop = 1.0 / torch.arange(1, I + 1, dtype=torch.float32) ** 1.1
    tu, ti = torch.randn(U, 4, generator=g), torch.randn(I, 4, generator=g)
    model = MF()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        u = torch.randint(0, U, (256,), generator=g)
        cand = torch.multinomial(pop, 256 * 2, replacement=True, generator=g).view(256, 2)
        pref = (tu[u].unsqueeze(1) * ti[cand]).sum(2)  # the user prefers the candidate with the larger score
        pos = cand.gather(1, pref.argmax(1, keepdim=True)).squeeze(1)
        neg = cand.gather(1, pref.argmin(1, keepdim=True)).squeeze(1)
        opt.zero_grad()
        loss = -nn.functional.logsigmoid(model(u, pos) - model(u, neg)).mean()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.8)


if __name__ == "__main__":
    sys.exit(main(globals()))
