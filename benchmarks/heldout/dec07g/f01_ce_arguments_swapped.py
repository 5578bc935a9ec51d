"""CrossEntropyLoss called with its arguments swapped: criterion(one_hot_targets, logits).

Since PyTorch 1.10 a float target is read as class probabilities, so the swapped call runs without
an error: the logits become the "target" and the one-hot vector the "input". The loss is then
linear in the logits (-sum logits * log_softmax(one_hot)), its gradient is a constant, and the
optimizer drives the logits (and the head's weights) without bound while the loss falls below
zero forever.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean, series  # noqa: E402

CASE = {
    "kind": ["activation_explosion", "exploding_gradient", "nonfinite", "loss_spike"],
    "layer": ["head", "<loss>"],
    "step": (0, 150),
    "bug": "criterion(F.one_hot(y).float(), logits): target and input swapped, loss linear in logits",
    "source": "PyTorch forum 'CrossEntropyLoss negative loss' threads; Humbatova et al. ICSE 2020 "
              "taxonomy, 'Wrong loss function calculation'; torch.nn.CrossEntropyLoss docs "
              "(probability targets since 1.10)",
    "arch": "3-layer MLP classifier, 5 Gaussian clusters",
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 64)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(64, 64)
        self.act2 = nn.ReLU()
        self.head = nn.Linear(64, 5)

    def forward(self, x):
        return self.head(self.act2(self.fc2(self.act1(self.fc1(x)))))


def data(n, g):
    centers = torch.randn(5, 20, generator=torch.Generator().manual_seed(1)) * 1.5
    y = torch.randint(0, 5, (n,), generator=g)
    return centers[y] + torch.randn(n, 20, generator=g), y


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("head",)) if probe else None
    for _ in range(200):
        x, y = data(64, g)
        logits = model(x)
        if fixed:
            loss = crit(logits, y)
        else:
            loss = crit(F.one_hot(y, 5).float(), logits)
        opt.zero_grad()
        loss.backward()
        if p:
            with torch.no_grad():
                acc = float((logits.argmax(1) == y).float().mean())
            p.step(loss, acc=acc)
        opt.step()


def truth(bug, twin):
    import math
    t_max = max(a for a in series(twin, "act", "head", "maxabs") if a is not None)
    blown = [i for i, a in enumerate(series(bug, "act", "head")) if a is not None
             and (a["finite"] < 1 or a["maxabs"] > 30 * t_max)]
    losses = [r["loss"] for r in bug]
    below = any((not math.isfinite(x)) or x < -10 for x in losses)
    acc_t = mean([r["acc"] for r in twin[-20:]])
    first = blown[0] if blown else None
    held = first is not None and first <= 150 and below and acc_t > 0.8
    return held, (f"bug head output non-finite or >30x the twin's max ({t_max:.3g}) from step {first}; "
                  f"bug loss reaches {min(losses, key=lambda x: x if math.isfinite(x) else -1e300):.3g}; "
                  f"twin acc {acc_t:.2f}")


if __name__ == "__main__":
    sys.exit(main(globals()))
