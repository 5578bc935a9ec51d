"""A multi-task net (depth-like regression + segmentation-like classification) with learned task
weights exp(-s_i) but WITHOUT the + s_i regulariser of Kendall et al.

Bug: ``loss = sum(exp(-s_i) * L_i)``: the cheapest way down is to raise every s_i, so the task
weights decay towards 0 (here ~1/(lr * L * t)), the loss "falls" while the shared trunk and both
heads receive gradients ever smaller (trunk x~1/100 of the twin's at the end): the 5-class task
stops improving near ln 5 (the easy regression is learnt in the first steps, before the decay).
Source: https://github.com/yaringal/multi-task-learning-example/issues/6 (loss went negative, "When
I removed log_var item the loss would be all right"); https://github.com/ifzhang/FairMOT/issues/249
(why the + s terms); Kendall, Gal & Cipolla CVPR 2018, eq. 7 and 10.
Fixed twin: ``sum(exp(-s_i) * L_i + s_i)``.
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, series  # noqa: E402

CASE = {
    "bug": "uncertainty task weights exp(-s) without the +s term: weights decay to 0, tasks stop learning",
    "source": "https://github.com/yaringal/multi-task-learning-example/issues/6; Kendall et al. CVPR 2018 eq. 7",
    "arch": "multi-task MLP: shared trunk, regression head and 5-class head, learned log-variances",
    "kind": ["vanishing_gradient", "loss_plateau", "frozen_weights"],
    "layer": ["weighting", "trunk", "trunk.*", "reg_head", "cls_head", "<loss>"],
    "step": [0, 120],
}


class Weighting(nn.Module):
    def __init__(self):
        super().__init__()
        self.s = nn.Parameter(torch.zeros(2))

    def forward(self, losses, with_reg):
        w = torch.exp(-self.s)
        total = (w * losses).sum()
        return total + self.s.sum() if with_reg else total


class MTL(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.reg_head = nn.Linear(64, 1)
        self.cls_head = nn.Linear(64, 5)
        self.weighting = Weighting()


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    wr, wc = torch.randn(16, 1, generator=g), torch.randn(16, 5, generator=g)
    model = MTL()
    opt = torch.optim.SGD(model.parameters(), lr=0.03, momentum=0.9)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randn(64, 16, generator=g)
        y_reg = torch.tanh(x @ wr) + 0.3 * torch.randn(64, 1, generator=g)
        y_cls = (x @ wc).argmax(1)
        h = model.trunk(x)
        l_reg = F.mse_loss(model.reg_head(h), y_reg)
        l_cls = F.cross_entropy(model.cls_head(h), y_cls)
        loss = model.weighting(torch.stack([l_reg, l_cls]), with_reg=fixed)
        opt.zero_grad()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss, l_reg=float(l_reg.detach()), l_cls=float(l_cls.detach()), w=float(torch.exp(-model.weighting.s.detach()).mean()))
        opt.step()


def truth(bug, twin):
    cb, ct = mean([r["l_cls"] for r in bug[-30:]]), mean([r["l_cls"] for r in twin[-30:]])
    rb, rt = mean([r["l_reg"] for r in bug[-30:]]), mean([r["l_reg"] for r in twin[-30:]])
    wb, wt = bug[-1]["w"], twin[-1]["w"]
    gb = mean(series(bug, "grad", "trunk.0")[-30:])
    gt = mean(series(twin, "grad", "trunk.0")[-30:])
    held = wb < 0.05 and wt > 0.3 and cb > 2 * ct and gb < 0.1 * gt
    return held, (f"task weight exp(-s) at the end bug {wb:.3g} twin {wt:.3g}; last-30 CE bug {cb:.3g} twin {ct:.3g}, "
                  f"MSE bug {rb:.3g} twin {rt:.3g}; trunk.0 grad last-30 bug {gb:.3g} twin {gt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
