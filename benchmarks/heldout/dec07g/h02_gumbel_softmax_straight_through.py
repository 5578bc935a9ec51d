"""A discrete autoencoder: 6 categorical codes through hard Gumbel-softmax (straight-through).

Healthy, built to fool: the bottleneck's forward output is exactly one-hot (0/1, "saturated"),
its gradient is the soft relaxation's, the sampling noise makes the loss jumpy, and most code
entries are exactly 0 at every step. The reconstruction loss falls.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "arch": "MLP encoder -> 6 x 8-way hard Gumbel-softmax -> MLP decoder",
        "fools": "one-hot (exactly 0/1) bottleneck, straight-through gradient, noisy loss"}


class GumbelCode(nn.Module):
    def forward(self, logits):
        return F.gumbel_softmax(logits.view(-1, 6, 8), tau=1.0, hard=True).view(-1, 48)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1, self.enc_act = nn.Linear(24, 128), nn.ReLU()
        self.enc2 = nn.Linear(128, 48)
        self.code = GumbelCode()
        self.dec1, self.dec_act = nn.Linear(48, 128), nn.ReLU()
        self.dec2 = nn.Linear(128, 24)

    def forward(self, x):
        z = self.code(self.enc2(self.enc_act(self.enc1(x))))
        return self.dec2(self.dec_act(self.dec1(z)))


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    atoms = (torch.rand(6, 8, 24, generator=torch.Generator().manual_seed(3)) > 0.7).float()
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    crit = nn.BCEWithLogitsLoss()
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("code",)) if probe else None
    for _ in range(250):
        idx = torch.randint(0, 8, (64, 6), generator=g)
        x = atoms[torch.arange(6), idx].amax(1)  # each sample ORs one atom per code group
        loss = crit(model(x), x)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    return loss_fell(bug, 0.6)


if __name__ == "__main__":
    sys.exit(main(globals()))
