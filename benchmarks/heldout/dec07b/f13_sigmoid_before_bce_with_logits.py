"""A Siamese verification network with a Sigmoid output fed to BCEWithLogitsLoss (sigmoid twice).

Bug: the head ends in ``nn.Sigmoid()`` and the loss is ``BCEWithLogitsLoss``, which applies its own
sigmoid: the predicted probability lives in [0.5, 0.73], so a "different" pair can never go below
0.5 and the loss has a floor far above the twin's.
Source: yudi-mars/daisyRec PR #15 ("Do not need sigmoid because there is sigmoid in
BCEWithLogitsLoss. Otherwise loss does not converge.", https://github.com/yudi-mars/daisyRec/pull/15);
avBuffer/UNet3plus_pth issue #23 (https://github.com/avBuffer/UNet3plus_pth/issues/23);
itakurah/focal-loss-pytorch PR #5 (the [0.5, 0.73] range).
Fixed twin: no Sigmoid in the model.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "Sigmoid output fed to BCEWithLogitsLoss: probabilities confined to [0.5, 0.73], a loss floor",
    "source": "https://github.com/yudi-mars/daisyRec/pull/15; https://github.com/avBuffer/UNet3plus_pth/issues/23",
    "arch": "Siamese MLP encoder (shared) + |e1 - e2| head, binary same/different",
    "kind": ["loss_plateau", "saturated_activation", "vanishing_gradient"],
    "layer": ["<loss>", "head_act", "head"],
    "step": [0, 150],
}


class Siamese(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 32))
        self.head = nn.Linear(32, 1)
        self.head_act = nn.Identity() if fixed else nn.Sigmoid()

    def forward(self, a, b):
        return self.head_act(self.head((self.encoder(a) - self.encoder(b)).abs())).squeeze(1)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randn(10, 12, generator=g) * 1.5
    model = Siamese(fixed)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.BCEWithLogitsLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        i = torch.randint(0, 10, (64,), generator=g)
        same = torch.rand(64, generator=g) < 0.5
        j = torch.where(same, i, (i + torch.randint(1, 10, (64,), generator=g)) % 10)
        a = ids[i] + 0.4 * torch.randn(64, 12, generator=g)
        b = ids[j] + 0.4 * torch.randn(64, 12, generator=g)
        y = (~same).float()  # 1 = different
        opt.zero_grad()
        loss = crit(model(a, b), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    lb = mean([r["loss"] for r in bug[-30:]])
    lt = mean([r["loss"] for r in twin[-30:]])
    floor = 0.5 * (-torch.log(torch.sigmoid(torch.tensor(1.0))) - torch.log(1 - torch.sigmoid(torch.tensor(0.0))))
    held = lb > 0.95 * float(floor) and lb > 4 * lt
    return held, f"last-30 loss bug {lb:.3g} (floor {float(floor):.3g}) twin {lt:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
