"""A bag-of-words text classifier trained in pure float16 (``model.half()``) with Adam's default eps.

Bug: Adam's ``eps=1e-8`` is below float16's smallest subnormal (~6e-8) and rounds to 0 in the
half-precision update. Every embedding row whose word is absent from a batch has a gradient of
exactly 0, so its moments are 0 and its update is 0 / (sqrt(0) + 0) = NaN: after the first step
those rows are NaN, the next batch that uses one gives a NaN loss, and NaN spreads everywhere.
Source: https://discuss.pytorch.org/t/adam-half-precision-nans/1765;
https://github.com/pytorch/pytorch/issues/8860 ("NaN loss when using half precision", fixed by
eps=1e-4); https://github.com/google-deepmind/optax/issues/1754 (NaN on float16 zero-gradient
steps, "an unused embedding row").
Fixed twin: ``Adam(..., eps=1e-4)``, the fix of those reports.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "pure float16 training with Adam eps=1e-8 (rounds to 0): zero-gradient embedding rows become NaN",
    "source": "https://discuss.pytorch.org/t/adam-half-precision-nans/1765",
    "arch": "embedding + mean pooling + MLP text classifier (3 classes), all in float16",
    "kind": ["nonfinite"],
    "layer": ["emb", "<optimizer>", "<loss>"],
    "step": [0, 2],
}

V, L = 300, 10


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 32)
        self.fc = nn.Linear(32, 64)
        self.head = nn.Linear(64, 3)

    def forward(self, tok):
        return self.head(torch.relu(self.fc(self.emb(tok).mean(1))))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    word_class = torch.randint(0, 3, (V,), generator=g)
    model = Net().half()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-4 if fixed else 1e-8)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        y = torch.randint(0, 3, (32,), generator=g)
        tok = torch.randint(0, V, (32, L), generator=g)
        own = (word_class == y[:, None]).float()
        tok[:, :4] = torch.multinomial(own, 4, replacement=True, generator=g)
        opt.zero_grad()
        loss = crit(model(tok).float(), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    first = next((i for i, r in enumerate(bug) if not math.isfinite(r["loss"])), None)
    stays = first is not None and all(not math.isfinite(r["loss"]) for r in bug[first:])
    lt = [r["loss"] for r in twin]
    twin_ok = all(math.isfinite(v) for v in lt) and mean(lt[-30:]) < 0.6 * mean(lt[:10])
    held = first is not None and first <= 2 and stays and twin_ok
    return held, (f"bug loss first non-finite at step {first}, non-finite after: {stays}; "
                  f"twin finite and learning: {twin_ok} ({mean(lt[:10]):.3g} -> {mean(lt[-30:]):.3g})")


if __name__ == "__main__":
    sys.exit(main(globals()))
