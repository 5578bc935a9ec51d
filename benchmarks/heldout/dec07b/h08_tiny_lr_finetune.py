"""Healthy: fine-tuning a pre-trained MLP on a shifted task with Adam at lr 2e-5.

Fools: updates are ~1e-4 of the weights per step (tiny on purpose, to keep the pre-trained
features), the gradients are small because the model is already good, and the loss falls slowly
but steadily. The pre-training runs before ``watch()``.
Source of the recipe: the small fine-tuning rates of Howard & Ruder ACL 2018 (ULMFiT) sec. 3.2 and
Devlin et al. NAACL 2019 (BERT) sec. A.3 (2e-5 to 5e-5).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "fools": "fine-tuning at lr 2e-5: update/weight ~1e-4, a slow but steady fall",
        "source": "Howard & Ruder ACL 2018 sec. 3.2; Devlin et al. NAACL 2019 sec. A.3", "arch": "MLP classifier, pre-trained then fine-tuned"}


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(12, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 4))
    proto = torch.randn(4, 12, generator=g)
    crit = nn.CrossEntropyLoss()
    pre = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(150):  # pre-training, not watched
        y = torch.randint(0, 4, (64,), generator=g)
        x = proto[y] + 1.0 * torch.randn(64, 12, generator=g)
        pre.zero_grad()
        crit(model(x), y).backward()
        pre.step()
    shifted = proto + 0.6 * torch.randn(4, 12, generator=g)  # the fine-tuning domain
    opt = torch.optim.Adam(model.parameters(), lr=2e-5)
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        y = torch.randint(0, 4, (256,), generator=g)
        x = shifted[y] + 1.0 * torch.randn(256, 12, generator=g)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    fell, said = loss_fell(bug, 0.9, first=20, last=20)
    rel = abs(bug[-1]["weight"]["2"] - bug[0]["weight"]["2"]) / bug[0]["weight"]["2"]
    return fell and rel < 0.05, f"{said}; layer 2 relative weight-norm change over the run {rel:.3g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
