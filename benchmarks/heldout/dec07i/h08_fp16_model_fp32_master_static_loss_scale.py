"""Healthy: mixed precision by hand, as apex's O2 / "master weights" recipe: an fp16 copy of the
model runs forward and backward with the loss scaled by 1024, the gradients are unscaled into
fp32 master weights, the optimizer steps the masters, and the fp16 model is refreshed from them.

What looks wrong: the watched fp16 model's gradients are 1024x their true size every step, its
parameters change by copy rather than by its own optimizer, and its weights are fp16-rounded.
Source: Micikevicius et al. ICLR 2018 "Mixed Precision Training" sec. 3.1-3.2 (fp32 master copy,
loss scaling); https://nvidia.github.io/apex/amp.html (opt_level O2, master weights).
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _case import loss_fell, main, mean  # noqa: E402

CASE = {"healthy": True, "what": "fp16 model + fp32 master weights + static loss scale 1024 (grads 1024x)",
        "source": "Micikevicius et al. ICLR 2018 sec. 3; https://nvidia.github.io/apex/amp.html (O2)",
        "arch": "MLP classifier (64 -> 128 -> 128 -> 10) in float16 with float32 masters"}

SCALE = 1024.0


def train(fixed=False, writer=None, probe=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    w_true = torch.randn(64, 10, generator=g)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 10))
    masters = [q.detach().clone().float().requires_grad_(False) for q in model.parameters()]
    model.half()
    opt = torch.optim.SGD(masters, lr=0.05, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    if writer:
        writer.watch(model)
    p = probe(model) if probe else None
    for step in range(200):
        x = torch.randn(128, 64, generator=g)
        y = (x @ w_true).argmax(1)
        for q in model.parameters():
            q.grad = None
        out = model(x.half()).float()
        loss = crit(out, y)
        (loss * SCALE).backward()
        if writer:
            writer.record(step, loss=loss)
        if p:
            p.step(loss, acc=float((out.argmax(1) == y).float().mean()))
        for mst, q in zip(masters, model.parameters()):
            mst.grad = q.grad.float() / SCALE
        opt.step()
        with torch.no_grad():
            for mst, q in zip(masters, model.parameters()):
                q.copy_(mst.half())


def truth(bug, twin):
    ok, msg = loss_fell(bug, 0.4)
    acc = mean([r["acc"] for r in bug[-20:]])
    return ok and acc > 0.8, f"{msg}; last-20 accuracy {acc:.3f}"


if __name__ == "__main__":
    sys.exit(main(globals()))
