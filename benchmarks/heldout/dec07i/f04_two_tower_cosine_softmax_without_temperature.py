"""A two-tower retrieval model trained with in-batch softmax over cosine similarities, no temperature.

Bug: the logits are raw cosines in [-1, 1] (temperature 1, meant 0.05). With 256 candidates the
softmax can never be confident (the loss is bounded below by log(1 + 255 e^-2) ~ 3.6), the
gradients of well-separated pairs stay as large as those of confused ones, and the towers learn
a fraction of what they learn with a temperature.
Source: https://github.com/FlagOpen/FlagEmbedding/issues/1008 ("Temperature should be smaller than
1.0 when use cosine similarity ... Recommend 0.01-0.1"), https://github.com/huggingface/sentence-transformers/issues/3179
(cosine bounded in [-1, 1] under cross-entropy), https://github.com/tensorflow/recommenders/issues/633.
Fixed twin: logits = cos / 0.05.
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "in-batch softmax on raw cosine similarities (temperature 1): loss floor ~3.6, towers learn little",
    "source": "https://github.com/FlagOpen/FlagEmbedding/issues/1008; https://github.com/huggingface/sentence-transformers/issues/3179",
    "arch": "two-tower recommender (user MLP, item MLP), in-batch sampled softmax, 256 candidates",
    "kind": ["loss_plateau"],
    "layer": ["<loss>", "user", "user.*", "item", "item.*"],
    "step": [0, 150],
}

B, N_USERS, N_ITEMS = 256, 4000, 4000


class TwoTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.user = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32))
        self.item = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32))

    def forward(self, u, i):
        return F.normalize(self.user(u), dim=1) @ F.normalize(self.item(i), dim=1).T


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    user_feat = torch.randn(N_USERS, 16, generator=g)
    item_feat = torch.randn(N_ITEMS, 16, generator=g)
    affinity = user_feat @ torch.randn(16, 16, generator=g) @ item_feat.T  # hidden taste
    model = TwoTower()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    tau = 0.05 if fixed else 1.0
    target = torch.arange(B)
    for _ in range(200):
        users = torch.randint(0, N_USERS, (B,), generator=g)
        items = affinity[users].argmax(1)  # each user's clicked item: its best match
        cos = model(user_feat[users], item_feat[items])
        loss = crit(cos / tau, target)
        opt.zero_grad()
        loss.backward()
        if p:
            with torch.no_grad():
                acc = float((cos.argmax(1) == target).float().mean())
            p.step(loss, acc=acc)
        opt.step()


def truth(bug, twin):
    ab = mean([r["acc"] for r in bug[-30:]])
    at = mean([r["acc"] for r in twin[-30:]])
    lb = mean([r["loss"] for r in bug[-30:]])
    l0 = mean([r["loss"] for r in bug[:5]])
    held = at > ab + 0.15 and lb > 3.6 and lb > 0.8 * l0
    return held, f"in-batch top-1 accuracy last-30 bug {ab:.3f} twin {at:.3f}; bug loss first-5 {l0:.3g} -> last-30 {lb:.3g} (floor 3.6)"


if __name__ == "__main__":
    sys.exit(main(globals()))
