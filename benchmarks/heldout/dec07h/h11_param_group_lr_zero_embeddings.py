"""A text classifier whose pretrained embedding sits in a param group with lr 0: gradients, no updates.

Healthy, built to fool: discriminative fine-tuning keeps the (pretend-pretrained) embedding table
fixed for this phase by giving its param group lr=0, rather than requires_grad=False: the table
receives a gradient at every step and never moves, while the GRU and head learn.
Source: Howard & Ruder ACL 2018 (ULMFiT, discriminative fine-tuning by per-layer rates);
https://pytorch.org/docs/stable/optim.html#per-parameter-options.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main  # noqa: E402

CASE = {"healthy": True, "what": "embedding param group at lr 0 on purpose: gradient every step, weights never move",
        "source": "Howard & Ruder ACL 2018 (ULMFiT); https://pytorch.org/docs/stable/optim.html#per-parameter-options",
        "arch": "embedding (lr 0) + GRU + linear head, sentiment-like token classification"}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.gru = nn.GRU(16, 32, batch_first=True)
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        return self.head(self.gru(self.emb(x))[1][-1])


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Net()
    opt = torch.optim.Adam([
        {"params": model.emb.parameters(), "lr": 0.0},
        {"params": list(model.gru.parameters()) + list(model.head.parameters()), "lr": 5e-3},
    ])
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model) if probe else None
    for _ in range(200):
        x = torch.randint(0, 50, (64, 10), generator=g)
        y = ((x < 10).sum(1) > (x >= 40).sum(1)).long()  # "positive" words outnumber "negative" ones
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        if p:
            p.step(loss)
        opt.step()


def truth(bug, twin):
    ok, detail = loss_fell(bug, 0.4)
    w0, w1 = bug[0]["weight"]["emb"], bug[-1]["weight"]["emb"]
    gmin = min(r["grad"]["emb"] for r in bug)
    return ok and w0 == w1 and gmin > 0, f"{detail}; emb weight norm unchanged {w0 == w1}, min emb grad {gmin:.2g}"


if __name__ == "__main__":
    sys.exit(main(globals()))
