"""BPR recommender whose "negative" item is the positive one (a reused variable in the sampler).

Bug: ``neg = pos`` (the sampler's negative index overwritten by the positive's): the BPR loss
``-log sigmoid(s(u, pos) - s(u, neg))`` is exactly ``ln 2`` with a gradient of exactly 0 for every
embedding, every step. Nothing trains; the ranking stays random. Loud in its flatness (the loss
is a constant to the last bit), silent in its statistics (no NaN).
Source: Rendle et al. UAI 2009, "BPR: Bayesian Personalized Ranking from Implicit Feedback",
sec. 4 (negatives must be items the user did NOT interact with); Humbatova et al. ICSE 2020,
"Training data" faults.
Fixed twin: a negative drawn uniformly from the items.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "BPR negative index overwritten by the positive: loss exactly ln 2, gradients exactly 0",
    "source": "Rendle et al. UAI 2009 sec. 4; Humbatova et al. ICSE 2020",
    "arch": "matrix-factorisation recommender (user/item embeddings), BPR loss",
    "kind": ["no_gradient", "loss_plateau", "vanishing_gradient"],
    "layer": ["users", "items", "<loss>"],
    "step": [0, 5],
}


class MF(nn.Module):
    def __init__(self):
        super().__init__()
        self.users, self.items = nn.Embedding(200, 16), nn.Embedding(300, 16)
        nn.init.normal_(self.users.weight, std=0.1)
        nn.init.normal_(self.items.weight, std=0.1)

    def forward(self, u, i):
        return (self.users(u) * self.items(i)).sum(1)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    taste = torch.randn(200, 4, generator=g)
    kind = torch.randn(300, 4, generator=g)
    pref = taste @ kind.T  # users like items with positive affinity
    model = MF()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        u = torch.randint(0, 200, (256,), generator=g)
        top = torch.topk(pref[u], 30, dim=1).indices
        pos = top[torch.arange(256), torch.randint(0, 30, (256,), generator=g)]
        neg = torch.randint(0, 300, (256,), generator=g)
        if not fixed:
            neg = pos
        opt.zero_grad()
        loss = -torch.nn.functional.logsigmoid(model(u, pos) - model(u, neg)).mean()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    gb = max(r["grad"]["users"] + r["grad"]["items"] for r in bug)
    flat = max(abs(r["loss"] - 0.6931471805599453) for r in bug)
    lt = sum(r["loss"] for r in twin[-20:]) / 20
    held = gb == 0 and flat < 1e-6 and lt < 0.5
    return held, f"bug max embedding grad norm {gb:.3g}, max |loss - ln2| {flat:.3g}; twin loss last 20 {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
