"""A small BERT-style (post-LN) transformer classifier whose weight init also draws the LayerNorm
gains and biases from N(0, 0.02).

Bug: ``init_bert_weights`` applies ``normal_(0, initializer_range)`` to every LayerNorm's gamma
and beta (meant: gamma 1, beta 0). In a post-LN encoder every block's output is then multiplied by
gains of ~0.02 with random signs: the representation reaching the head is ~50x too small and
scrambled in sign per feature, and the model sits at chance for its first ~45 steps (the twin is at ~0.87 by then) before
the gains grow ("bad convergence").
Source: https://github.com/huggingface/transformers/issues/143 ("bug in init_bert_weights ... will
lead to bad convergence"), fixed by https://github.com/huggingface/transformers/pull/171
(LayerNorm gamma/beta ``fill_(1.0)`` / ``zero_()``).
Fixed twin: LayerNorm gamma 1, beta 0.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "init_bert_weights draws LayerNorm gamma/beta from N(0, 0.02): post-LN outputs x0.02, slow convergence",
    "source": "https://github.com/huggingface/transformers/issues/143; https://github.com/huggingface/transformers/pull/171",
    "arch": "post-LN transformer encoder (3 nn.TransformerEncoderLayer, d=64) + CLS head, 4 classes",
    "kind": ["activation_collapse", "vanishing_gradient", "loss_plateau"],
    "layer": ["encoder.layers.0*", "encoder.layers.1*", "encoder.layers.2*", "encoder", "encoder.*", "<loss>"],
    "step": [0, 40],
}

V, L, D = 20, 16, 64


class Bert(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.zeros(1, L, D))
        layer = nn.TransformerEncoderLayer(D, 4, 128, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 3, enable_nested_tensor=False)
        self.head = nn.Linear(D, 4)

    def forward(self, x):
        return self.head(self.encoder(self.emb(x) + self.pos)[:, 0])


def init_bert_weights(model, fixed):
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            m.weight.data.normal_(0.0, 0.02)
        if isinstance(m, nn.LayerNorm):
            if fixed:
                m.weight.data.fill_(1.0)
                m.bias.data.zero_()
            else:
                m.weight.data.normal_(0.0, 0.02)
                m.bias.data.normal_(0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            m.bias.data.zero_()
    nn.init.normal_(model.pos, 0.0, 0.02)


def batch(g, n=64):
    """Label: which of 4 marker tokens (1..4) occurs most often (3-4 times; two other markers twice each)."""
    x = torch.randint(5, V, (n, L), generator=g)
    y = torch.randint(0, 4, (n,), generator=g)
    for i in range(n):
        k = int(torch.randint(3, 5, (1,), generator=g))
        pos = torch.randperm(L - 1, generator=g) + 1
        x[i, pos[:k]] = int(y[i]) + 1
        others = [m for m in range(1, 5) if m != int(y[i]) + 1]
        j = int(torch.randint(0, 3, (1,), generator=g))
        x[i, pos[k:k + 2]] = others[j]
        x[i, pos[k + 2:k + 4]] = others[(j + 1) % 3]
    x[:, 0] = 0  # CLS
    return x, y


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Bert()
    init_bert_weights(model, fixed)
    opt = torch.optim.Adam(model.parameters(), lr=5e-4)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("encoder",)) if probe else None
    for _ in range(200):
        x, y = batch(g)
        opt.zero_grad()
        out = model(x)
        loss = crit(out, y)
        loss.backward()
        if p:
            p.step(loss, acc=float((out.argmax(1) == y).float().mean()))
        opt.step()


def truth(bug, twin):
    sb, st = bug[0]["act"]["encoder"]["std"], twin[0]["act"]["encoder"]["std"]
    eb, et = mean([r["acc"] for r in bug[:40]]), mean([r["acc"] for r in twin[20:40]])
    ab, at = mean([r["acc"] for r in bug]), mean([r["acc"] for r in twin])
    lb, lt = mean([r["loss"] for r in bug[-30:]]), mean([r["loss"] for r in twin[-30:]])
    held = sb < st / 20 and eb < 0.3 and et > 0.6 and lb > 5 * lt
    return held, (f"step-0 encoder output std bug {sb:.3g} twin {st:.3g}; accuracy steps 0-39 bug {eb:.3f} (chance 0.25), twin steps 20-39 {et:.3f}; "
                  f"whole-run mean accuracy bug {ab:.3f} twin {at:.3f}; last-30 loss bug {lb:.3g} twin {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
