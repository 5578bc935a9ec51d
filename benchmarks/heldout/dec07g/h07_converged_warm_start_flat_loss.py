"""Continued training of an already converged classifier: the loss is ~0 and flat all run long.

Healthy, built to fool: the model was trained to convergence before monitoring starts (as when a
run is resumed from a good checkpoint), so the loss never falls by a tenth, the gradients are tiny
and the updates ~1e-6 of the weights. Nothing is wrong: it stays converged.
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import main, mean  # noqa: E402

CASE = {"healthy": True, "arch": "MLP classifier resumed at convergence, Adam lr 1e-4",
        "fools": "flat near-zero loss (no fall), tiny gradients and updates from step 0"}


def train(fixed, writer, probe):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    protos = torch.randn(6, 24, generator=torch.Generator().manual_seed(13)) * 2
    model = nn.Sequential(nn.Linear(24, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 6))
    crit = nn.CrossEntropyLoss()

    def batch():
        y = torch.randint(0, 6, (64,), generator=g)
        return protos[y] + 0.7 * torch.randn(64, 24, generator=g), y

    pre = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(300):  # the earlier run this one resumes
        x, y = batch()
        pre.zero_grad()
        crit(model(x), y).backward()
        pre.step()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    if writer is not None:
        writer.watch(model, optimizer=opt, criterion=crit)
    p = probe(model, acts=("1", "3")) if probe else None
    for _ in range(150):
        x, y = batch()
        logits = model(x)
        loss = crit(logits, y)
        opt.zero_grad()
        loss.backward()
        if p:
            p.step(loss, acc=float((logits.argmax(1) == y).float().mean()))
        opt.step()


def truth(bug, twin):
    first = mean([r["loss"] for r in bug[:10]])
    last = mean([r["loss"] for r in bug[-20:]])
    acc = mean([r["acc"] for r in bug])
    dead = max(mean([r["act"][k]["zero"] for r in bug if k in r["act"]]) for k in ("1", "3"))
    held = last < 0.02 and last <= 1.5 * first + 1e-4 and acc > 0.99 and dead < 0.9
    return held, f"loss first-10 {first:.2g} -> last-20 {last:.2g} (stays at its floor); acc {acc:.3f}; max ReLU zero fraction {dead:.2f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
