"""Healthy: a dense objectness head with focal loss and the RetinaNet prior bias (sigmoid starts at 0.01).

A conv net scores every cell of an 8x8 grid as object / background; only ~5 % of cells are objects.
As in RetinaNet, the last conv's bias is initialised to -log((1 - pi) / pi) with pi = 0.01, so every
sigmoid output starts saturated near 0.01, and the focal loss (gamma 2, alpha 0.25) makes the loss
tiny from the first step and down-weights the easy background cells. It trains: recall and
precision on the object cells go up.
Source: Lin, Goyal, Girshick, He & Dollar, "Focal Loss for Dense Object Detection", ICCV 2017,
sec. 3 and 4.1 ("Initialization": prior pi = 0.01 for the classification subnet's bias).
"""

import math
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {
    "healthy": True,
    "bug": "focal loss + prior bias -4.6 on a 5 %-positive dense objectness head (outputs start at 0.01)",
    "source": "Lin et al. ICCV 2017 (RetinaNet) sec. 3, 4.1",
    "arch": "conv dense head (1x16x16 image -> 8x8 objectness logits)",
}


class DenseHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(16, 16, 3, stride=2, padding=1)
        self.act2 = nn.ReLU()
        self.cls = nn.Conv2d(16, 1, 3, padding=1)
        nn.init.normal_(self.cls.weight, std=0.01)
        nn.init.constant_(self.cls.bias, -math.log((1 - 0.01) / 0.01))

    def forward(self, x):
        return self.cls(self.act2(self.conv2(self.act1(self.conv1(x))))).squeeze(1)


def focal_loss(logits, target, alpha=0.25, gamma=2.0):
    p = torch.sigmoid(logits)
    ce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    p_t = p * target + (1 - p) * (1 - target)
    a_t = alpha * target + (1 - alpha) * (1 - target)
    return (a_t * (1 - p_t) ** gamma * ce).sum() / target.sum().clamp(min=1)


def batch(g, n=16):
    x = 0.3 * torch.randn(n, 1, 16, 16, generator=g)
    target = (torch.rand(n, 8, 8, generator=g) < 0.05).float()
    for i, r, c in target.nonzero().tolist():
        x[i, 0, 2 * r:2 * r + 2, 2 * c:2 * c + 2] += 1.5
    return x, target


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = DenseHead()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        x, target = batch(g)
        opt.zero_grad()
        logits = model(x)
        loss = focal_loss(logits, target)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            pred = logits.detach() > 0
            tp = float((pred & (target > 0)).sum())
            p.step(loss, tp=tp, pos=float(target.sum()), predpos=float(pred.sum()))
        opt.step()


def truth(bug, twin):
    fell, detail = loss_fell(bug, 0.3)
    last = bug[-30:]
    recall = sum(r["tp"] for r in last) / max(sum(r["pos"] for r in last), 1)
    precision = sum(r["tp"] for r in last) / max(sum(r["predpos"] for r in last), 1)
    held = fell and recall > 0.8 and precision > 0.8
    return held, f"{detail}; last-30 recall {recall:.3g} precision {precision:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
