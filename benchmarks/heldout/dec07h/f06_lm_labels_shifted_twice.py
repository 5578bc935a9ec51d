"""A causal LM that shifts labels inside its forward, given labels the user already shifted.

Bug: like Hugging Face ``*ForCausalLM`` models, the model shifts ``labels`` by one inside
``forward``; the training loop also passes ``labels = input_ids[:, 1:]`` (padded), so every
position is trained to predict the token two ahead. In this data (pairs: a random token, then a
token determined by it) the token two ahead is never predictable: the loss stays at ln V while
the twin gets half the tokens right.
Source: https://github.com/huggingface/transformers/pull/44642 ("users who pre-shift their labels
and end up training next-next-token prediction by accident"); https://github.com/InternLM/InternLM/issues/318;
https://github.com/huggingface/transformers/pull/562 (a pre-shift removed from an example).
Fixed twin: ``labels = input_ids``.
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "labels shifted by the user and again inside the causal LM: every position predicts the token two ahead (unpredictable)",
    "source": "https://github.com/huggingface/transformers/pull/44642; https://github.com/InternLM/InternLM/issues/318",
    "arch": "GRU causal language model (embedding, GRU, linear head), loss computed inside forward",
    "kind": ["loss_plateau"],
    "layer": ["<loss>"],
    "step": [0, 150],
}

V = 32


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 32)
        self.gru = nn.GRU(32, 64, batch_first=True)
        self.head = nn.Linear(64, V)

    def forward(self, ids, labels):
        logits = self.head(self.gru(self.emb(ids))[0])
        # shift inside the model, as Hugging Face causal LMs do
        return F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1), ignore_index=-100)


def batch(g, perm, n=32, pairs=12):
    a = torch.randint(0, V, (n, pairs), generator=g)
    return torch.stack([a, perm[a]], -1).reshape(n, 2 * pairs)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    perm = torch.randperm(V, generator=g)
    model = TinyLM()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        ids = batch(g, perm)
        if fixed:
            labels = ids
        else:
            labels = torch.cat([ids[:, 1:], torch.full((ids.shape[0], 1), -100)], 1)
        opt.zero_grad()
        loss = model(ids, labels)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lb, lt = mean([r["loss"] for r in bug[-20:]]), mean([r["loss"] for r in twin[-20:]])
    fell = bug[0]["loss"] - lb
    held = lb > 1.5 * lt and lb > 3.3 and fell < 0.3
    return held, f"last-20 loss bug {lb:.3g} (ln 32 = 3.47, fell {fell:.2g} from step 0) twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
