"""An EmbeddingBag text classifier trained with ``nn.NLLLoss`` on raw logits (no log_softmax).

Bug: NLLLoss expects log-probabilities; on raw scores it is ``-mean(logit[target])``, which has
no minimum: SGD raises the target logits without bound. The stacked layers feed each other's
gradient (each layer's gradient grows with the others' weights), so the weights grow faster than
geometrically: the "loss" goes negative at once and runs off to -inf, then NaN.
Source: the NLLLoss docs ("The input given through a forward call is expected to contain
log-probabilities of each class", https://pytorch.org/docs/stable/generated/torch.nn.NLLLoss.html);
https://runebook.dev/en/docs/pytorch/generated/torch.nn.nllloss/torch.nn.NLLLoss (the common gotcha:
"NLLLoss does not take the raw outputs (often called logits)").
Fixed twin: ``log_softmax`` before NLLLoss.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "NLLLoss on raw logits: unbounded-below loss, weights and embeddings grow geometrically",
    "source": "https://pytorch.org/docs/stable/generated/torch.nn.NLLLoss.html (expects log-probabilities)",
    "arch": "EmbeddingBag (mean) + 2-layer ReLU MLP + linear head text classifier (5 classes)",
    "kind": ["activation_explosion", "exploding_gradient", "nonfinite", "loss_spike"],
    "layer": ["head", "fc1", "fc2", "emb", "<loss>"],
    "step": [0, 50],
}

V, D, L = 200, 32, 16


class Net(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed
        self.emb = nn.EmbeddingBag(V, D, mode="mean")
        self.fc1 = nn.Linear(D, 64)
        self.fc2 = nn.Linear(64, 64)
        self.head = nn.Linear(64, 5)

    def forward(self, tok):
        h = torch.relu(self.fc2(torch.relu(self.fc1(self.emb(tok)))))
        out = self.head(h)
        return torch.log_softmax(out, 1) if self.fixed else out


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    word_class = torch.randint(0, 5, (V,), generator=g)
    model = Net(fixed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    crit = nn.NLLLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("head",)) if probe else None
    for _ in range(200):
        tok = torch.randint(0, V, (64, L), generator=g)
        y = torch.randint(0, 5, (64,), generator=g)
        own = (word_class == y[:, None]).float()  # each document: half its words from its class
        tok[:, : L // 2] = torch.multinomial(own, L // 2, replacement=True, generator=g)
        opt.zero_grad()
        loss = crit(model(tok), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    big = next((i for i, r in enumerate(bug) if r["act"].get("head", {}).get("maxabs", 0) > 1e3
                or r["act"].get("head", {}).get("finite", 1) < 1), None)
    neg = next((i for i, r in enumerate(bug) if r["loss"] < 0), None)
    tmax = max(r["act"]["head"]["maxabs"] for r in twin)
    lt = [r["loss"] for r in twin]
    held = big is not None and big <= 50 and neg is not None and neg <= 10 and tmax < 100 and all(
        math.isfinite(v) and v > 0 for v in lt) and mean(lt[-30:]) < 0.6 * mean(lt[:10])
    return held, (f"bug loss < 0 from step {neg}, head |out| > 1e3 or non-finite from step {big}; "
                  f"twin max |head out| {tmax:.3g}, loss {mean(lt[:10]):.3g} -> {mean(lt[-30:]):.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
