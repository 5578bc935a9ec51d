"""A text classifier whose vocabulary was built from lower-cased text, looked up with raw tokens.

Every token of the corpus is capitalised ("Good", "Refund"...), the vocabulary holds only the
lower-cased forms, so every lookup misses and returns <unk>: the model's input is the same index at
every position of every sample, it cannot tell any sentence apart and the loss stays at ln 3.
"""
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "kind": ["data_anomaly", "loss_plateau", "activation_collapse"],
    "layer": ["<input>", "<loss>", "emb"],
    "step": (0, 40),
    "bug": "vocab from text.lower(), lookup of raw-case tokens: every index is <unk>",
    "source": "torchtext / HF tokenizers issues 'all tokens map to [UNK]' (do_lower_case mismatch "
              "between vocabulary and tokenizer, e.g. huggingface/transformers BERT uncased vocab "
              "with do_lower_case=False); Humbatova et al. ICSE 2020 'Preprocessing of training "
              "data' faults",
    "arch": "embedding bag (mean) + MLP text classifier, 3 classes",
}

WORDS = [f"Word{i}" for i in range(60)]


def corpus(g, n):
    y = torch.randint(0, 3, (n,), generator=g)
    sents = []
    for i in range(n):
        idx = torch.randint(0, 60, (12,), generator=g).tolist()
        cue = torch.randint(0, 5, (3,), generator=g).tolist()
        idx[:3] = [20 * int(y[i]) + c for c in cue]  # class cue words Word{20y..20y+4}
        sents.append([WORDS[j] for j in idx])
    return sents, y


class Net(nn.Module):
    def __init__(self, n_vocab):
        super().__init__()
        self.emb = nn.EmbeddingBag(n_vocab, 32, mode="mean")
        self.fc = nn.Linear(32, 32)
        self.act = nn.ReLU()
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.act(self.fc(self.emb(x))))


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    sents, labels = corpus(g, 6400)
    vocab = {"<pad>": 0, "<unk>": 1}
    for s in sents:
        for w in s:
            vocab.setdefault(w.lower(), len(vocab))

    def encode(s):
        return [vocab.get(w.lower() if fixed else w, 1) for w in s]

    ids = torch.tensor([encode(s) for s in sents])
    model = Net(len(vocab))
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    crit = nn.CrossEntropyLoss()
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for step in range(200):
        sl = slice((step * 32) % 6400, (step * 32) % 6400 + 32)
        x, y = ids[sl], labels[sl]
        logits = model(x)
        loss = crit(logits, y)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss, distinct=int(x.unique().numel()), acc=float((logits.argmax(1) == y).float().mean()))
        opt.step()


def truth(bug, twin):
    db = max(r["distinct"] for r in bug)
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = db == 1 and abs(lb - math.log(3)) < 0.08 and lt < 0.3 * lb
    return held, f"distinct token ids per bug batch (max) {db}; loss last-30 bug {lb:.3f} (ln3 1.099) vs twin {lt:.3f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
