"""A key-value retrieval transformer whose attention runs in fp16 with a hand-written softmax that
does not subtract the row maximum.

Bug: ``e = scores.exp(); w = e / e.sum(-1)`` in float16. As training sharpens the attention the
largest score passes (at step 52) ln(65504) ~ 11.1, ``exp`` overflows to inf, inf/inf is NaN, and the NaN
reaches the loss and every weight.
Source: https://github.com/NVIDIA/FasterTransformer/issues/43 ("the softmax input is not protected
(subtract the max value)" -> NaN from a layer), https://github.com/pytorch/executorch/pull/18407
(naive exp(x)/sum(exp(x)) -> Infinity -> NaN), https://github.com/intel/xFasterTransformer/pull/326.
Fixed twin: the same fp16 attention with ``exp(scores - scores.amax(-1))``.
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

V, L, D = 16, 12, 32


class HalfAttention(nn.Module):
    """Single-head attention computed in float16 (to save memory), projections in fp32."""

    def __init__(self, stable):
        super().__init__()
        self.q = nn.Linear(D, D)
        self.k = nn.Linear(D, D)
        self.v = nn.Linear(D, D)
        self.stable = stable

    def forward(self, x):
        q, k, v = self.q(x[:, :1]).half(), self.k(x).half(), self.v(x).half()
        s = q @ k.transpose(1, 2) / math.sqrt(D)
        if self.stable:
            s = s - s.amax(-1, keepdim=True)
        e = s.exp()
        w = e / e.sum(-1, keepdim=True)
        return (w @ v).float()[:, 0]


class Retriever(nn.Module):
    def __init__(self, stable):
        super().__init__()
        self.key_emb = nn.Embedding(V, D)
        self.val_emb = nn.Embedding(V, D)
        self.attn = HalfAttention(stable)
        self.head = nn.Linear(D, V)

    def forward(self, query, keys, vals):
        h = torch.cat([self.key_emb(query)[:, None], self.key_emb(keys) + self.val_emb(vals)], 1)
        return self.head(self.attn(h))


def batch(g, n=64):
    """A query key, then L-1 (distinct key, value) pairs; the answer is the query key's value."""
    keys = torch.stack([torch.randperm(V, generator=g)[:L - 1] for _ in range(n)])
    vals = torch.randint(0, V, (n, L - 1), generator=g)
    pick = torch.randint(0, L - 1, (n,), generator=g)
    return keys[torch.arange(n), pick], keys, vals, vals[torch.arange(n), pick]


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Retriever(stable=fixed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("attn",)) if probe else None
    for _ in range(STEPS):
        q, k, v, y = batch(g)
        opt.zero_grad()
        loss = crit(model(q, k, v), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


STEPS = 200
NAN_STEP = 52  # first step whose attention output is non-finite (measured by the probe, --truth)

CASE = {
    "bug": "fp16 attention with a hand-written softmax without max subtraction: exp overflows, NaN",
    "source": "https://github.com/NVIDIA/FasterTransformer/issues/43; https://github.com/pytorch/executorch/pull/18407",
    "arch": "key-value retrieval: key/value embeddings + single-head fp16 attention + linear head (16 symbols)",
    "kind": ["nonfinite"],
    "layer": ["attn", "attn.*"],
    "step": [NAN_STEP, NAN_STEP + 1],
}


def truth(bug, twin):
    first = next((i for i, r in enumerate(bug) if not math.isfinite(r["loss"])), None)
    act = next((i for i, r in enumerate(bug) if r["act"]["attn"]["finite"] < 1), None)
    twin_ok = all(math.isfinite(r["loss"]) for r in twin)
    lt = mean([r["loss"] for r in twin[-20:]])
    held = act == NAN_STEP and first == NAN_STEP and twin_ok and lt < 0.5 * twin[0]["loss"]
    return held, f"bug attn output first non-finite at step {act}, loss at {first}; twin finite {twin_ok}, twin loss {twin[0]['loss']:.3g} -> {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
