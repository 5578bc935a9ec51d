"""Segmentation training whose random-crop augmentation draws the image's and the mask's offsets apart.

Bug: the augmentation is applied as two independent transforms, ``crop(image)`` and ``crop(mask)``,
each drawing its own random offset (up to +-3 pixels each way). Image and mask no longer line up: the
net sees the object in one place and is told it is somewhere else. Nothing crashes; the loss settles
at a high floor and the predicted masks are blurred blobs (low IoU on aligned data).
Source: https://discuss.pytorch.org/t/torchvision-transfors-how-to-perform-identical-transform-on-both-image-and-target/10606
(random transforms applied separately to image and target draw different parameters); torchvision
docs "Transforming images, videos, boxes and more" (v2 transforms take image and mask together so
they get the same random parameters).
Fixed twin: one offset drawn per sample and applied to both.
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "random crop applied to image and mask with independently drawn offsets: targets misaligned",
    "source": "https://discuss.pytorch.org/t/torchvision-transfors-how-to-perform-identical-transform-on-both-image-and-target/10606",
    "arch": "conv segmenter (1x16x16 crops of 22x22 images, binary masks of small squares)",
    "kind": ["loss_plateau", "data_anomaly"],
    "layer": ["<loss>", "<input>"],
    "step": [0, 80],
}


class Segmenter(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.act2 = nn.ReLU()
        self.out = nn.Conv2d(16, 1, 1)

    def forward(self, x):
        return self.out(self.act2(self.conv2(self.act1(self.conv1(x))))).squeeze(1)


def scene(g, n):
    img = 0.3 * torch.randn(n, 22, 22, generator=g)
    mask = torch.zeros(n, 22, 22)
    for i in range(n):
        for _ in range(3):
            r, c = (int(v) for v in torch.randint(3, 16, (2,), generator=g))
            img[i, r:r + 3, c:c + 3] += 1.0
            mask[i, r:r + 3, c:c + 3] = 1.0
    return img, mask


def crop(t, offs):
    return torch.stack([t[i, r:r + 16, c:c + 16] for i, (r, c) in enumerate(offs.tolist())])


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Segmenter()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    if writer:
        writer.watch(model, optimizer=opt)
    p = probe(model) if probe else None
    for _ in range(180):
        img, mask = scene(g, 16)
        off_img = torch.randint(0, 7, (16, 2), generator=g)
        off_mask = off_img if fixed else torch.randint(0, 7, (16, 2), generator=g)
        x, y = crop(img, off_img)[:, None], crop(mask, off_mask)
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(model(x), y)
        loss.backward()
        if writer:
            writer.record(loss=loss)
        if p:
            with torch.no_grad():  # IoU on aligned crops, the task the model is meant to learn
                xa, ya = crop(img, off_img)[:, None], crop(mask, off_img)
                pred = (model(xa) > 0).float()
                iou = float((pred * ya).sum() / ((pred + ya) > 0).float().sum().clamp(min=1))
            p.step(loss, iou=iou)
        opt.step()


def truth(bug, twin):
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    ib = mean([r["iou"] for r in bug[-30:]])
    it = mean([r["iou"] for r in twin[-30:]])
    held = lb > 3 * lt and it > 0.9 and ib < it - 0.3
    return held, f"last-30 loss bug {lb:.3g} twin {lt:.3g}; aligned IoU bug {ib:.3g} twin {it:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
