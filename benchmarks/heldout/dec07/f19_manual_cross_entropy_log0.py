"""An MLP classifier with a hand-written cross-entropy ``-(onehot * log(softmax(z))).sum()``.

Bug: once the network is confident, some softmax probabilities underflow to exactly 0 in float32;
``log(0) = -inf`` and ``0 * -inf = NaN``, so the loss (and every gradient) turns NaN mid-training,
long after a clean start. The large-margin data and a high rate make the logits grow quickly.
Source: allenai/allennlp issue #2797 "Softmax giving absolute 0 resulting in 'nan' loss value"
(https://github.com/allenai/allennlp/issues/2797); aymericdamien/TensorFlow-Examples issue #383
"Loss may become NAN during training" (``y * log(pred)``).
Fixed twin: ``F.cross_entropy`` on the logits (log-sum-exp inside).
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "cross-entropy written as -(onehot * log(softmax)).sum(): log(0) * 0 = NaN once confident",
    "source": "https://github.com/allenai/allennlp/issues/2797; https://github.com/aymericdamien/TensorFlow-Examples/issues/383",
    "arch": "MLP classifier, hand-written loss",
    "kind": ["nonfinite"],
    "layer": ["<loss>"],
    "step": [35, 36],
}


def onehot_ce(logits, y):
    """The hand-written loss of the report (the bug)."""
    return -(F.one_hot(y, logits.shape[1]).float() * torch.log(torch.softmax(logits, 1))).sum(1).mean()


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 6))
    proto = torch.randn(6, 10, generator=g) * 3
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    crit = nn.CrossEntropyLoss() if fixed else onehot_ce
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        y = torch.randint(0, 6, (64,), generator=g)
        x = proto[y] + 0.3 * torch.randn(64, 10, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    first = next((i for i, r in enumerate(bug) if r["loss"] != r["loss"]), None)
    twin_ok = all(r["loss"] == r["loss"] for r in twin)
    held = first == 35 and twin_ok
    return held, f"bug loss first NaN at step {first} (finite before); twin finite throughout: {twin_ok}"


if __name__ == "__main__":
    sys.exit(main(globals()))
