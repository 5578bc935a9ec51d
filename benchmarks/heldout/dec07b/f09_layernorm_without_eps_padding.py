"""A small attention classifier with a hand-written LayerNorm without eps, on zero-embedded padding.

Bug: ``(x - mean) / x.std(-1)`` with no epsilon; padding tokens embed to the zero vector
(``padding_idx=0``), so their std is 0 and the first LayerNorm outputs 0/0 = NaN at the padded
positions; attention spreads the NaN to every token and the loss is NaN from the first step.
Source: lsdefine/attention-is-all-you-need-keras issue #13 ("'nan' loss function when using layer
normalization" with zero-masked embeddings, https://github.com/lsdefine/attention-is-all-you-need-keras/issues/13);
deepspeedai/DeepSpeed issue #581 (variance 0 on zero padding gives NaN,
https://github.com/deepspeedai/DeepSpeed/issues/581).
Fixed twin: ``/ sqrt(var + 1e-5)``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "hand-written LayerNorm without eps: zero-embedded padding tokens give 0/0 = NaN",
    "source": "https://github.com/lsdefine/attention-is-all-you-need-keras/issues/13; https://github.com/deepspeedai/DeepSpeed/issues/581",
    "arch": "token embedding + hand LayerNorm + nn.MultiheadAttention + mean pool + linear",
    "kind": ["nonfinite"],
    "layer": ["ln1"],
    "step": [0, 1],
}


class LayerNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.g, self.b, self.eps = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d)), eps

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        if self.eps is None:
            return self.g * (x - mu) / x.std(-1, keepdim=True) + self.b
        return self.g * (x - mu) / torch.sqrt(x.var(-1, keepdim=True) + self.eps) + self.b


class Net(nn.Module):
    def __init__(self, eps):
        super().__init__()
        self.emb = nn.Embedding(40, 32, padding_idx=0)
        self.ln1 = LayerNorm(32, eps)
        self.attn = nn.MultiheadAttention(32, 4, batch_first=True)
        self.ln2 = LayerNorm(32, eps)
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        h = self.ln1(self.emb(x))
        h = self.ln2(h + self.attn(h, h, h, need_weights=False)[0])
        return self.head(h.mean(1))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net(1e-5 if fixed else None)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("emb", "ln1")) if probe else None
    for _ in range(150):
        x = torch.randint(1, 40, (32, 16), generator=g)
        lengths = torch.randint(6, 17, (32,), generator=g)
        x[torch.arange(16).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
        groups = torch.stack([((x > 13 * k) & (x <= 13 * (k + 1))).sum(1) for k in range(3)], 1)
        y = groups.argmax(1)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    emb_ok = bug[0]["act"]["emb"]["finite"] == 1.0
    ln_bad = bug[0]["act"]["ln1"]["finite"] < 1.0
    first = next((i for i, r in enumerate(bug) if r["loss"] != r["loss"]), None)
    twin_ok = all(r["loss"] == r["loss"] for r in twin) and twin[-1]["loss"] < 0.5 * twin[0]["loss"]
    held = emb_ok and ln_bad and first == 0 and twin_ok
    return held, (f"step 0: emb finite {emb_ok}, ln1 finite fraction {bug[0]['act']['ln1']['finite']:.2f}; "
                  f"bug loss first NaN at {first}; twin finite and trains: {twin_ok}")


if __name__ == "__main__":
    sys.exit(main(globals()))
