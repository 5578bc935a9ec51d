"""CrossEntropyLoss(label_smoothing=1.0): a "confidence" of 1.0 passed where the smoothing goes.

The Annotated Transformer's LabelSmoothing takes `smoothing` and keeps `confidence = 1 - smoothing`;
passing the confidence (1.0) as torch's label_smoothing turns every target into the uniform
distribution. The labels are gone from the loss: the classifier learns to output equal logits,
its loss sinks to ln K and its accuracy stays at chance.
"""
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "kind": ["loss_plateau", "activation_collapse"],
    "layer": ["<loss>", "head"],
    "step": (0, 60),
    "bug": "nn.CrossEntropyLoss(label_smoothing=1.0) (confidence passed as smoothing): uniform targets",
    "source": "harvardnlp 'The Annotated Transformer' LabelSmoothing(smoothing, confidence=1-smoothing); "
              "torch.nn.CrossEntropyLoss docs (label_smoothing in [0, 1], 1.0 = uniform targets); "
              "Humbatova et al. ICSE 2020 'Wrong loss function parameter'",
    "arch": "small CNN on 8-class synthetic glyphs",
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.act1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.act2 = nn.ReLU()
        self.pool2 = nn.AdaptiveAvgPool2d(2)
        self.head = nn.Linear(128, 8)

    def forward(self, x):
        h = self.pool1(self.act1(self.conv1(x)))
        return self.head(self.pool2(self.act2(self.conv2(h))).flatten(1))


def batch(g, protos, n=32):
    y = torch.randint(0, 8, (n,), generator=g)
    return protos[y] + 0.5 * torch.randn(n, 1, 12, 12, generator=g), y


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    protos = (torch.rand(8, 1, 12, 12, generator=torch.Generator().manual_seed(2)) > 0.6).float()
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.CrossEntropyLoss(label_smoothing=0.1 if fixed else 1.0)
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("head",)) if probe else None
    for _ in range(200):
        x, y = batch(g, protos)
        logits = model(x)
        loss = crit(logits, y)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss, acc=float((logits.argmax(1) == y).float().mean()))
        opt.step()


def truth(bug, twin):
    ab = mean([r["acc"] for r in bug[-40:]])
    at = mean([r["acc"] for r in twin[-40:]])
    lb = mean([r["loss"] for r in bug[-20:]])
    sb = mean([r["act"]["head"]["std"] for r in bug[-20:]])
    st = mean([r["act"]["head"]["std"] for r in twin[-20:]])
    held = ab < 0.3 and at > 0.9 and abs(lb - math.log(8)) < 0.02 and sb < 0.1 * st
    return held, (f"acc last-40 bug {ab:.2f} vs twin {at:.2f}; bug loss last-20 {lb:.4f} (ln8 "
                  f"{math.log(8):.4f}); head output std bug {sb:.3g} vs twin {st:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
