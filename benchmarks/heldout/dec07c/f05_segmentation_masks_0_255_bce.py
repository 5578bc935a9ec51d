"""A small fully-convolutional segmenter trained on masks left in {0, 255} with BCEWithLogitsLoss.

Bug: the binary masks are read from 8-bit PNGs and cast to float without ``/ 255``: targets are 0
or 255. BCEWithLogitsLoss accepts them; its gradient per logit is ``sigmoid(x) - 255`` instead of
at most 1, so the output layer's gradient is ~500x the twin's from the first step, the logits are
pushed up without bound and the loss goes negative and keeps falling.
Source: https://www.codegenes.net/blog/pytorch-bce-below-0 ("BCE below 0": targets outside
[0, 1]); Humbatova et al. ICSE 2020, 'Wrong preprocessing' (labels not normalised).
Fixed twin: masks divided by 255.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, ratio  # noqa: E402

CASE = {
    "bug": "segmentation masks in {0, 255} fed to BCEWithLogitsLoss (not /255): logit gradient x~500, loss negative",
    "source": "https://www.codegenes.net/blog/pytorch-bce-below-0; Humbatova et al. ICSE 2020 'Wrong preprocessing'",
    "arch": "fully-convolutional segmenter (Conv2d x2 + 1x1 output conv)",
    "kind": ["exploding_gradient", "activation_explosion", "loss_spike", "nonfinite", "initial_loss", "data_anomaly"],
    "layer": ["out", "<loss>", "<input>"],
    "step": [0, 5],
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.act2 = nn.ReLU()
        self.out = nn.Conv2d(8, 1, 1)

    def forward(self, x):
        return self.out(self.act2(self.conv2(self.act1(self.conv1(x)))))


def batch(g, n=16):
    img = torch.randn(n, 1, 16, 16, generator=g) * 0.2
    mask = torch.zeros(n, 1, 16, 16)
    for i in range(n):
        r, c = torch.randint(0, 10, (2,), generator=g).tolist()
        img[i, 0, r:r + 6, c:c + 6] += 1.0
        mask[i, 0, r:r + 6, c:c + 6] = 255.0  # as read from an 8-bit PNG
    return img, mask


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    crit = nn.BCEWithLogitsLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("out",)) if probe else None
    for _ in range(150):
        x, m = batch(g)
        if fixed:
            m = m / 255.0
        opt.zero_grad()
        loss = crit(model(x), m)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    gr = ratio(bug[0]["grad"]["out"], twin[0]["grad"]["out"])
    neg = next((i for i, r in enumerate(bug) if not r["loss"] >= 0), None)
    lt = mean([r["loss"] for r in twin[-30:]])
    held = gr > 100 and neg is not None and neg <= 5 and lt < 0.3
    return held, (f"out grad norm at step 0 bug/twin {gr:.3g}; bug loss first negative or non-finite at "
                  f"step {neg} (last {bug[-1]['loss']:.3g}); twin last-30 loss {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
