"""A small U-Net-like conv denoiser whose init loop calls ``nn.init.uniform_(w)``: weights in [0, 1).

Bug: ``nn.init.uniform_`` defaults to U(0, 1), not a symmetric range: every weight is positive, each
3x3 conv with 16-32 input channels multiplies the activation scale by ~fan_in/2, and the decoder
output is ~1e6-1e8 at step 0; gradients follow.
Source: torch.nn.init.uniform_ docs (a=0.0, b=1.0 defaults, https://pytorch.org/docs/stable/nn.init.html);
Humbatova et al. ICSE 2020, 'Wrong weights initialisation' (Model / Layers).
Fixed twin: ``nn.init.kaiming_uniform_(w, nonlinearity='relu')``.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, ratio  # noqa: E402

CASE = {
    "bug": "init loop uses nn.init.uniform_ (U(0,1)): all-positive conv weights, activations x fan_in/2 per layer",
    "source": "https://pytorch.org/docs/stable/nn.init.html; Humbatova et al. ICSE 2020 (wrong weights initialisation)",
    "arch": "U-Net-like conv denoiser (2 down, 2 up, one skip)",
    "kind": ["activation_explosion", "exploding_gradient", "nonfinite"],
    "layer": ["enc1", "enc2"],
    "step": [0, 2],
}


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1 = nn.Conv2d(1, 16, 3, padding=1)
        self.enc2 = nn.Conv2d(16, 32, 3, padding=1, stride=2)
        self.dec1 = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.dec2 = nn.Conv2d(32, 1, 3, padding=1)

    def forward(self, x):
        e1 = torch.relu(self.enc1(x))
        e2 = torch.relu(self.enc2(e1))
        d1 = torch.relu(self.dec1(e2))
        return self.dec2(torch.cat([d1, e1], 1))


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = UNet()
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            if fixed:
                nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")
            else:
                nn.init.uniform_(m.weight)
            nn.init.zeros_(m.bias)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = nn.MSELoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("enc1", "enc2", "dec2")) if probe else None
    xx, yy = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    for _ in range(150):
        cx = torch.randint(3, 13, (32, 1, 1), generator=g).float()
        cy = torch.randint(3, 13, (32, 1, 1), generator=g).float()
        clean = (((xx - cx) ** 2 + (yy - cy) ** 2) < 9).float().unsqueeze(1)
        noisy = clean + 0.3 * torch.randn(32, 1, 16, 16, generator=g)
        opt.zero_grad()
        loss = crit(model(noisy), clean)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    a1 = ratio(bug[0]["act"]["enc1"]["maxabs"], twin[0]["act"]["enc1"]["maxabs"])
    a2 = ratio(bug[0]["act"]["enc2"]["maxabs"], twin[0]["act"]["enc2"]["maxabs"])
    ad = ratio(bug[0]["act"]["dec2"]["maxabs"], twin[0]["act"]["dec2"]["maxabs"])
    gr = ratio(bug[0]["grad"]["enc1"], twin[0]["grad"]["enc1"])
    lb = mean([r["loss"] for r in bug[-20:]])
    lt = mean([r["loss"] for r in twin[-20:]])
    held = a2 > 10 and ad > 1e4 and gr > 1e4 and (lb != lb or lb > 3 * lt)
    return held, (f"step 0 max|act| bug/twin enc1 {a1:.3g} enc2 {a2:.3g} dec2 {ad:.3g}; enc1 grad bug/twin {gr:.3g}; "
                  f"last-20 loss bug {lb:.3g} twin {lt:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
