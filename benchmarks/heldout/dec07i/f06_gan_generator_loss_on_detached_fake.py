"""A GAN on 2-D data whose generator loss is computed on ``fake.detach()``.

Bug: the generator step reuses the discriminator step's detached fakes, ``D(fake.detach())``: the
generator loss has no path to the generator, its weights get no gradient and never move, and its
samples stay where the initialisation put them while the discriminator wins.
Source: https://github.com/nikhilsinghmus/image2reverb/issues/37 (maintainer: "that .detach()
should not be there for the generator step and is a bug"), https://github.com/wangle53/CSA-CDGAN/issues/5
("you detach the 'pred_fake', so the loss cannot update anything").
Fixed twin: ``D(fake)`` in the generator step.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, series  # noqa: E402

CASE = {
    "bug": "generator loss on D(fake.detach()): the generator never gets a gradient",
    "source": "https://github.com/nikhilsinghmus/image2reverb/issues/37; https://github.com/wangle53/CSA-CDGAN/issues/5",
    "arch": "GAN, MLP generator and MLP discriminator, 2-D Gaussian-ring data",
    "kind": ["no_gradient", "frozen_weights"],
    "layer": ["gen", "gen.*"],
    "step": [0, 2],
}


class GAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.gen = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
        self.disc = nn.Sequential(nn.Linear(2, 64), nn.LeakyReLU(0.2), nn.Linear(64, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))


def real_batch(g, n=128):
    ang = torch.randint(0, 8, (n,), generator=g).float() * (3.14159 / 4)
    return torch.stack([3 * torch.cos(ang), 3 * torch.sin(ang)], 1) + 0.1 * torch.randn(n, 2, generator=g)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = GAN()
    opt_d = torch.optim.Adam(model.disc.parameters(), lr=1e-3, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(model.gen.parameters(), lr=1e-3, betas=(0.5, 0.999))
    crit_d, crit_g = nn.BCEWithLogitsLoss(), nn.BCEWithLogitsLoss()
    if writer:
        writer.watch(model, optimizer=opt_g, criterion=crit_g)
    p = probe(model) if probe else None
    ones, zeros = torch.ones(128, 1), torch.zeros(128, 1)
    for _ in range(200):
        real = real_batch(g)
        fake = model.gen(torch.randn(128, 4, generator=g))
        opt_d.zero_grad()
        d_loss = crit_d(model.disc(real), ones) + crit_d(model.disc(fake.detach()), zeros)
        d_loss.backward()
        opt_d.step()
        opt_g.zero_grad()
        g_loss = crit_g(model.disc(fake if fixed else fake.detach()), ones)
        g_loss.backward()
        if p:
            with torch.no_grad():
                radius = float(fake.norm(dim=1).mean())
            p.step(g_loss, radius=radius)
        opt_g.step()


def truth(bug, twin):
    gb = [v for v in series(bug, "grad", "gen.0")]
    gt = mean(series(twin, "grad", "gen.0"))
    wb0, wb1 = bug[0]["weight"]["gen.0"], bug[-1]["weight"]["gen.0"]
    rb, rt = mean([r["radius"] for r in bug[-20:]]), mean([r["radius"] for r in twin[-20:]])
    held = all(v is None or v == 0 for v in gb) and gt > 1e-3 and wb0 == wb1 and abs(rt - 3) < abs(rb - 3) / 2
    return held, (f"bug gen.0 grad always None/0: {all(v is None or v == 0 for v in gb)}, twin mean {gt:.3g}; bug gen.0 weight unchanged {wb0 == wb1}; "
                  f"mean sample radius last-20 bug {rb:.3g} twin {rt:.3g} (data 3)")


if __name__ == "__main__":
    sys.exit(main(globals()))
