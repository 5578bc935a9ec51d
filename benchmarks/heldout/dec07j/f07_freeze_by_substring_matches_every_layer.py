"""Freezing "the backbone" by a name substring that every layer's name contains.

Bug: ``for n, p in model.named_parameters(): if "layer" in n: p.requires_grad = False`` meant to
freeze the pretrained ``layers.*`` backbone but the new head is named ``classifier_layer``, so the
head is frozen too: the optimizer, built over the parameters that still require a gradient,
trains only the input LayerNorm. The model cannot fit the new task: the
loss stays near its start. Silent: no NaN, weights simply do not move.
Source: PyTorch forum "How the pytorch freeze network in some layers, only the rest of the training?"
(https://discuss.pytorch.org/t/how-the-pytorch-freeze-network-in-some-layers-only-the-rest-of-the-training/7088),
freezing by name; Humbatova et al. ICSE 2020 "Model > Layers" faults.
Fixed twin: ``n.startswith("layers.")``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main  # noqa: E402

CASE = {
    "bug": "freeze by substring 'layer' also freezes the new head 'classifier_layer': only a LayerNorm trains",
    "source": "https://discuss.pytorch.org/t/how-the-pytorch-freeze-network-in-some-layers-only-the-rest-of-the-training/7088",
    "arch": "frozen MLP backbone + new linear head (transfer learning)",
    "kind": ["frozen_weights", "no_gradient", "loss_plateau"],
    "layer": ["classifier_layer", "<optimizer>", "<loss>"],
    "step": [0, 20],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(24)
        self.layers = nn.Sequential(nn.Linear(24, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.classifier_layer = nn.Linear(64, 5)

    def forward(self, x):
        return self.classifier_layer(self.layers(self.norm(x)))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    for n, prm in model.named_parameters():
        if (n.startswith("layers.") if fixed else "layer" in n):
            prm.requires_grad = False
    opt = torch.optim.Adam([q for q in model.parameters() if q.requires_grad], lr=3e-3)
    centers = torch.randn(5, 24, generator=g) * 1.5
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(160):
        y = torch.randint(0, 5, (64,), generator=g)
        x = centers[y] + torch.randn(64, 24, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lb = sum(r["loss"] for r in bug[-20:]) / 20
    lt = sum(r["loss"] for r in twin[-20:]) / 20
    g_head = [r["grad"]["classifier_layer"] for r in bug]
    held = lb > 3 * lt and all(v is None for v in g_head)
    return held, f"loss last 20: bug {lb:.3g}, twin {lt:.3g}; bug head never has a gradient: {all(v is None for v in g_head)}"


if __name__ == "__main__":
    sys.exit(main(globals()))
