"""An anchor-free box regressor trained with -log(IoU) without a floor: a zero-area box gives inf and NaN.

Bug: the head predicts the distances (left, top, right, bottom) from a point inside the object through
a ReLU, as UnitBox/FCOS-style heads do, and the loss is ``-torch.log(iou)``. A prediction whose two
opposite distances are both 0 (a ReLU at 0) is a zero-area box: intersection 0, IoU 0, -log(0) =
inf, and backward multiplies inf by zeros: NaN gradients in the head and everything below it.
Source: https://github.com/zhimingluo/UnitBox_TF/issues/6 ("reproduced IOUloss by pytorch ... I got
NaN"); https://github.com/open-mmlab/mmdetection/pull/3394 ("Fix NaN issue when predicted box has no
area ... Predicted boxes of zero area occur early in training of some anchor free detectors");
https://github.com/tensorflow/models/issues/6536.
Fixed twin: the IoU clamped to a floor before the log, as mmdetection's IoULoss does.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "box distances through ReLU, loss -log(IoU) with no floor: zero-area predictions give inf loss, NaN grads",
    "source": "https://github.com/open-mmlab/mmdetection/pull/3394; https://github.com/zhimingluo/UnitBox_TF/issues/6",
    "arch": "CNN box regressor (16x16 image, one rectangle around the centre, ltrb distances)",
    "kind": ["nonfinite"],
    "layer": ["<loss>", "box", "box_act"],
    "step": [0, 3],
}


class BoxNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.act2 = nn.ReLU()
        self.box = nn.Linear(16 * 8 * 8, 4)
        self.box_act = nn.ReLU()

    def forward(self, x):
        return self.box_act(self.box(self.act2(self.conv2(self.act1(self.conv1(x)))).flatten(1)))


def batch(g, n=32):
    ltrb = torch.randint(1, 8, (n, 4), generator=g)
    x = 0.1 * torch.randn(n, 1, 16, 16, generator=g)
    for i in range(n):
        le, to, ri, bo = (int(v) for v in ltrb[i])
        x[i, 0, 8 - to:8 + bo, 8 - le:8 + ri] += 1.0
    return x, ltrb.float() / 8


def iou_ltrb(p, t):
    area_p = (p[:, 0] + p[:, 2]) * (p[:, 1] + p[:, 3])
    area_t = (t[:, 0] + t[:, 2]) * (t[:, 1] + t[:, 3])
    iw = torch.min(p[:, 0], t[:, 0]) + torch.min(p[:, 2], t[:, 2])
    ih = torch.min(p[:, 1], t[:, 1]) + torch.min(p[:, 3], t[:, 3])
    inter = iw * ih
    return inter / (area_p + area_t - inter)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = BoxNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model, acts=("box_act",)) if probe else None
    for _ in range(150):
        x, t = batch(g)
        opt.zero_grad()
        iou = iou_ltrb(model(x), t)
        if fixed:
            loss = -iou.clamp(min=1e-6).log().mean()
        else:
            loss = -torch.log(iou).mean()
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            p.step(loss, iou=float(iou.detach().mean()))
        opt.step()


def truth(bug, twin):
    first_bad = next((i for i, r in enumerate(bug) if not r["loss"] < float("inf")), None)
    grad_box0 = bug[0]["grad"]["box"]
    twin_finite = all(r["loss"] < float("inf") for r in twin)
    ib = mean([r["iou"] for r in twin[:10]])
    ie = mean([r["iou"] for r in twin[-20:]])
    held = first_bad == 0 and grad_box0 != grad_box0 and twin_finite and ie > ib + 0.2
    return held, (f"bug loss first inf/NaN at step {first_bad}, box grad norm at step 0 {grad_box0}; twin "
                  f"finite {twin_finite}, mean IoU first-10 {ib:.3g} -> last-20 {ie:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
