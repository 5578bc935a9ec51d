"""A CNN classifier whose images are divided by 255 twice (once by hand, once by a ToTensor-like step).

Bug: the loader already returns floats in [0, 1] and the transform divides by 255 again: the
inputs live in [0, 0.004], the first conv sees almost nothing but its bias, and SGD barely moves
the loss in 200 steps.
Source: SYSU-SAIL/SOF-VSR issue #14 ("You normalize the LR tensors twice. One is in the code
/255, then .div(255) again in toTensor()", https://github.com/SYSU-SAIL/SOF-VSR/issues/14);
facebookresearch/InterHand2.6M issue #110 ("This process takes the pixel value to a very small
value between 0 and 1/255", https://github.com/facebookresearch/InterHand2.6M/issues/110).
Fixed twin: divided once.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "images divided by 255 twice: inputs in [0, 1/255], the model hardly learns",
    "source": "https://github.com/SYSU-SAIL/SOF-VSR/issues/14; https://github.com/facebookresearch/InterHand2.6M/issues/110",
    "arch": "CNN classifier (Conv2d x2 + linear), 4 classes of 12x12 images",
    "kind": ["data_anomaly", "loss_plateau", "vanishing_gradient"],
    "layer": ["<input>", "<loss>", "0"],
    "step": [0, 150],
}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                          nn.Linear(64, 4))
    proto = torch.rand(4, 1, 12, 12, generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        y = torch.randint(0, 4, (64,), generator=g)
        pixels = ((proto[y] + 0.25 * torch.randn(64, 1, 12, 12, generator=g)).clamp(0, 1) * 255).round()
        x = pixels / 255.0
        if not fixed:
            x = x / 255.0  # the ToTensor-like transform divides again
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss, xstd=float(x.std()))
        opt.step()


def truth(bug, twin):
    s = bug[0]["xstd"] / twin[0]["xstd"]
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    held = abs(s * 255 - 1) < 0.01 and lb > 1.2 and lb > 3 * lt
    return held, f"input std bug/twin {s:.3g} (1/255 = 0.00392); last-30 loss bug {lb:.3g} (ln 4 = 1.386) twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
