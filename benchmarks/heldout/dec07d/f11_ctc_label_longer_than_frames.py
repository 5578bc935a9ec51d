"""A BiLSTM + CTC recogniser whose data hold one transcription longer than its frame sequence.

Bug: CTC needs at least as many output frames as target labels (more when labels repeat); the
data set has one mislabelled utterance whose transcription (30 labels) is longer than the 16
frames the model emits, and the loss keeps ``nn.CTCLoss``'s default ``zero_infinity=False``. The
batch that holds it (step 77) gets an infinite loss and non-finite gradients, and the Adam step
writes NaN into the weights: the run is NaN from then on, after 77 healthy steps.
Source: https://github.com/meijieru/crnn.pytorch/issues/235 ("Why my CTC loss is always NaN or
Inf": "make sure the length of the predicted sequence > 2 * length(label) + 1");
https://github.com/ypwhs/captcha_break/issues/29; https://github.com/open-mmlab/mmocr/pull/159
and https://github.com/wenet-e2e/wenet/pull/2299 (fix: zero_infinity=True).
Fixed twin: ``nn.CTCLoss(zero_infinity=True)`` (the impossible utterance contributes nothing).
"""

import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "CTC target longer than the output frames (one bad utterance) with zero_infinity=False",
    "source": "https://github.com/meijieru/crnn.pytorch/issues/235",
    "arch": "BiLSTM over feature frames + linear head, CTC loss (blank + 8 labels)",
    "kind": ["nonfinite"],
    "layer": ["<loss>", "head", "lstm"],
    "step": [77, 79],
}

C, F, T, B, BAD = 9, 8, 16, 16, 77


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(F, 48, batch_first=True, bidirectional=True)
        self.head = nn.Linear(96, C)

    def forward(self, x):
        return self.head(self.lstm(x)[0]).log_softmax(-1)


def batch(g, k, protos):
    n = torch.randint(2, 6, (B,), generator=g)
    labels = [torch.randint(1, C, (int(m),), generator=g) for m in n]
    x = torch.zeros(B, T, F)
    for b, lab in enumerate(labels):  # each label occupies 3 frames of its prototype plus noise
        for j, c in enumerate(lab.tolist()):
            x[b, 3 * j:3 * j + 3] = protos[c]
    x = x + 0.3 * torch.randn(B, T, F, generator=g)
    if k == BAD:
        labels[5] = torch.randint(1, C, (30,), generator=g)  # the mislabelled utterance
    return x, torch.cat(labels), torch.tensor([len(lab) for lab in labels])


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    protos = torch.randn(C, F, generator=g)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.CTCLoss(zero_infinity=fixed)
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for k in range(200):
        x, tgt, tlen = batch(g, k, protos)
        opt.zero_grad()
        logp = model(x).transpose(0, 1)  # (T, B, C) as CTCLoss wants
        loss = crit(logp, tgt, torch.full((B,), T), tlen)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    first = next((i for i, r in enumerate(bug) if not math.isfinite(r["loss"])), None)
    stays = first is not None and all(not math.isfinite(r["loss"]) for r in bug[first + 1:])
    before = mean([r["loss"] for r in bug[60:BAD]])
    lt0, lt1 = mean([r["loss"] for r in twin[:10]]), mean([r["loss"] for r in twin[-30:]])
    twin_ok = all(math.isfinite(r["loss"]) for r in twin) and lt1 < 0.5 * lt0
    held = first == BAD and stays and before < 0.7 * lt0 and twin_ok
    return held, (f"bug loss first non-finite at step {first}, non-finite after: {stays}, steps 60-76 "
                  f"{before:.3g}; twin finite and learning: {twin_ok} ({lt0:.3g} -> {lt1:.3g})")


if __name__ == "__main__":
    sys.exit(main(globals()))
