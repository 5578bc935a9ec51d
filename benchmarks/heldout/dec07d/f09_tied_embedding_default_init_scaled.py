"""A small causal transformer LM with tied input/output embeddings left at nn.Embedding's N(0, 1).

Bug: the input embedding is multiplied by sqrt(d_model) as in Vaswani et al., and the output
projection is tied to it, but the table keeps nn.Embedding's default N(0, 1) initialisation
instead of N(0, d^-1/2): the inputs have std ~sqrt(d), and the tied output logits have std
~sqrt(d) too, so the first loss is many times ln V and the embedding, its entries far larger than
every other weight, trains slowly: the loss stays far above the twin's.
Source: https://github.com/pytorch/pytorch/issues/3121 ("the weight initialization in the
Embedding class is normal_(0, 1) ... It took me many hours to find out the reason why my net did
not train"); https://github.com/speechbrain/speechbrain/issues/926 and
https://github.com/espnet/espnet/issues/3454 (decoder embedding initialised with variance 1 and
scaled by sqrt(dim) "does not train properly"); https://github.com/facebookresearch/fairseq/issues/47.
Fixed twin: ``nn.init.normal_(emb.weight, std=d_model ** -0.5)`` (fairseq's transformer Embedding).
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "tied embedding kept at N(0,1) while scaled by sqrt(d_model): huge initial logits, slow embedding",
    "source": "https://github.com/pytorch/pytorch/issues/3121; https://github.com/espnet/espnet/issues/3454",
    "arch": "2-layer causal TransformerEncoder LM (pre-LN) with tied embedding / output projection",
    "kind": ["initial_loss"],
    "layer": ["<loss>", "emb", "lm_head"],
    "step": [0, 5],
}

V, T, D = 64, 24, 64


class LM(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        if fixed:
            nn.init.normal_(self.emb.weight, std=D ** -0.5)
        self.pos = nn.Parameter(torch.zeros(T, D))
        nn.init.normal_(self.pos, std=0.02)
        layer = nn.TransformerEncoderLayer(D, 4, 128, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.emb.weight  # tied
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(T))

    def forward(self, tok):
        h = self.emb(tok) * math.sqrt(D) + self.pos
        h = self.blocks(h, mask=self.mask, is_causal=True)
        return self.lm_head(self.norm(h))


def corpus(g, n=20000):
    # a first-order Markov source with a sparse transition table: learnable, entropy well below ln V
    nxt = torch.randint(0, V, (V, 3), generator=g)
    s = [0]
    choice = torch.randint(0, 3, (n,), generator=g)
    for c in choice.tolist():
        s.append(int(nxt[s[-1], c]))
    return torch.tensor(s)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    s = corpus(g)
    model = LM(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(150):
        i = torch.randint(0, len(s) - T - 1, (32,), generator=g)
        x = torch.stack([s[j:j + T] for j in i.tolist()])
        y = torch.stack([s[j + 1:j + T + 1] for j in i.tolist()])
        opt.zero_grad()
        loss = crit(model(x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lnv = math.log(V)
    b0, t0 = bug[0]["loss"], twin[0]["loss"]
    lb = mean([r["loss"] for r in bug[-20:]])
    lt = mean([r["loss"] for r in twin[-20:]])
    held = b0 > 3 * lnv and t0 < 2 * lnv and lb > 1.5 * lt
    return held, f"first loss bug {b0:.3g} twin {t0:.3g} (ln V = {lnv:.3g}); last-20 bug {lb:.3g} twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
