"""A matrix-factorisation recommender whose ReduceLROnPlateau is stepped on every mini-batch's
noisy training loss (meant: once per epoch, on the epoch's loss).

Bug: ``scheduler.step(loss.item())`` inside the batch loop with patience=5: a mini-batch loss
is noisy, so "no new minimum for 5 steps" happens every few batches and each time the rate is
cut x0.1; within a few dozen steps the rate is at 1e-8 and the embeddings stop moving while the
model is still far from fitted.
Source: https://github.com/Lightning-AI/pytorch-lightning/issues/673 (rate cut every 3 steps,
1e-2 -> 3e-5 "Correctly using ReduceLROnPlateau"), https://github.com/keras-team/keras/issues/10924
("reduced every 2 epochs causing the training to stop progressing"),
https://github.com/fizyr/keras-retinanet/pull/1370 ("fairly aggressive ... a problem if the
number of steps per epoch is low"); torch.optim.lr_scheduler.ReduceLROnPlateau docs.
Fixed twin: the same scheduler stepped once per 25-batch epoch on the epoch's mean loss.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {
    "bug": "ReduceLROnPlateau(patience=5) stepped on every noisy mini-batch loss: lr 1e-2 -> 1e-8 in ~60 steps",
    "source": "https://github.com/Lightning-AI/pytorch-lightning/issues/673; https://github.com/keras-team/keras/issues/10924",
    "arch": "matrix factorisation (user/item embeddings 16-D, dot product), implicit-feedback BCE",
    "kind": ["frozen_weights", "loss_plateau", "vanishing_gradient"],
    "layer": ["<optimizer>", "<loss>", "users", "items"],
    "step": [0, 62],  # cuts at steps 14, 21, 31, 49, 55, 61 (measured); nothing learnt before the first
}

NU, NI = 300, 200


class MF(nn.Module):
    def __init__(self):
        super().__init__()
        self.users = nn.Embedding(NU, 16)
        self.items = nn.Embedding(NI, 16)
        nn.init.normal_(self.users.weight, 0, 0.1)
        nn.init.normal_(self.items.weight, 0, 0.1)

    def forward(self, u, i):
        return (self.users(u) * self.items(i)).sum(1)


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    tu, ti = torch.randn(NU, 4, generator=g), torch.randn(NI, 4, generator=g)
    pref = torch.sigmoid(2 * tu @ ti.T)
    model = MF()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.1, patience=5)
    crit = nn.BCEWithLogitsLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    epoch_losses = []
    for step in range(250):
        u = torch.randint(0, NU, (128,), generator=g)
        i = torch.randint(0, NI, (128,), generator=g)
        y = torch.bernoulli(pref[u, i], generator=g)
        opt.zero_grad()
        loss = crit(model(u, i), y)
        loss.backward()
        if p:
            with torch.no_grad():
                full = torch.sigmoid(model.users.weight @ model.items.weight.T)
                err = float(((full - pref) ** 2).mean())
            p.step(loss, lr=opt.param_groups[0]["lr"], err=err)
        opt.step()
        epoch_losses.append(float(loss.detach()))
        if not fixed:
            sched.step(float(loss.detach()))
        elif step % 25 == 24:
            sched.step(mean(epoch_losses))
            epoch_losses = []


def truth(bug, twin):
    low = next((i for i, r in enumerate(bug) if r["lr"] < 1e-6), None)
    eb, et = mean([r["err"] for r in bug[-20:]]), mean([r["err"] for r in twin[-20:]])
    e0 = bug[0]["err"]
    held = low is not None and low < 80 and eb > 2 * et and twin[-1]["lr"] >= 1e-4
    return held, (f"bug lr first < 1e-6 at step {low}, final {bug[-1]['lr']:.1g} (twin final {twin[-1]['lr']:.1g}); "
                  f"MSE of predicted vs true preference matrix start {e0:.3g}, last-20 bug {eb:.3g} twin {et:.3g}")


if __name__ == "__main__":
    sys.exit(main(globals()))
