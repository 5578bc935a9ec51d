"""A small CNN autoencoder fed raw 0-255 pixel values (the /255 of ToTensor was dropped).

Bug: a custom Dataset returns ``torch.tensor(img, dtype=torch.float32)`` on uint8 images instead of
``ToTensor()``: inputs and reconstruction targets are in [0, 255]; the first conv's outputs are
~300x the twin's, the gradients ~1e4x, and SGD at the twin's rate diverges.
Source: Humbatova et al., "Taxonomy of Real Faults in Deep Learning Systems" (ICSE 2020), Training
> Preprocessing of training data > "Missing normalisation / not normalised data"; torchvision
ToTensor docs ("Converts ... in the range [0, 255] to ... in the range [0.0, 1.0]").
Fixed twin: pixels divided by 255.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, ratio  # noqa: E402

CASE = {
    "bug": "uint8 images cast to float without /255: inputs and targets in [0, 255]",
    "source": "Humbatova et al. ICSE 2020 'not normalised data'; torchvision ToTensor docs",
    "arch": "convolutional autoencoder (Conv2d / ConvTranspose2d)",
    "kind": ["data_anomaly", "activation_explosion", "exploding_gradient", "initial_loss"],
    "layer": ["<input>", "enc1"],
    "step": [0, 2],
}


class AE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1 = nn.Conv2d(1, 8, 3, stride=2, padding=1)
        self.act1 = nn.ReLU()
        self.enc2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.act2 = nn.ReLU()
        self.dec1 = nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1)
        self.act3 = nn.ReLU()
        self.dec2 = nn.ConvTranspose2d(8, 1, 4, stride=2, padding=1)

    def forward(self, x):
        return self.dec2(self.act3(self.dec1(self.act2(self.enc2(self.act1(self.enc1(x)))))))


def images(g, n=32):
    yy, xx = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    cx, cy = torch.randint(4, 12, (2, n, 1, 1), generator=g).float()
    r = torch.randint(2, 5, (n, 1, 1), generator=g).float()
    img = (((xx - cx) ** 2 + (yy - cy) ** 2) < r ** 2).float() * 200 + torch.rand(n, 16, 16, generator=g) * 55
    return img.to(torch.uint8).unsqueeze(1)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = AE()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("enc1",)) if probe else None
    for _ in range(200):
        raw = images(g)
        x = raw.float() / 255 if fixed else torch.tensor(raw.numpy(), dtype=torch.float32)
        opt.zero_grad()
        loss = crit(model(x), x)
        loss.backward()
        if p:
            p.step(loss, rel=float(loss.detach() / x.pow(2).mean()))
        opt.step()


def truth(bug, twin):
    a = ratio(bug[0]["act"]["enc1"]["maxabs"], twin[0]["act"]["enc1"]["maxabs"])
    g = ratio(bug[0]["grad"]["enc1"], twin[0]["grad"]["enc1"])
    rb, rt = mean([r["rel"] for r in bug[-20:]]), mean([r["rel"] for r in twin[-20:]])
    held = a > 50 and g > 1000 and (rb != rb or rb > 1.5 * rt)
    return held, f"step 0 enc1 max|act| bug/twin {a:.3g}, enc1 grad bug/twin {g:.3g}; last-20 relative MSE bug {rb:.3g} twin {rt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
