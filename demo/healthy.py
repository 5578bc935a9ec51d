"""Healthy control: a small ReLU MLP learns a 10-class task with Adam.

The loss falls and every layer stays healthy, so the report names no root
cause and lists no warning: a healthy run is silent. This file is also the
shortest complete example of using the writer in an ordinary training loop.
"""

import sys

import torch
from torch import nn

from tb_neuraldbg import DebugWriter

if __package__:
    from ._common import CLASSES, FEATURES, classification_batches, main, mlp, run_dir
else:  # run as a script: python demo/healthy.py
    from _common import CLASSES, FEATURES, classification_batches, main, mlp, run_dir

NAME = "healthy"
STEPS = 200
EXPECTED = None  # nothing planted: no root cause, no warning


def build_model() -> nn.Module:
    # fc1, relu1, fc2, relu2, head: named children give readable layer names
    # in the report and the heatmap.
    return mlp(FEATURES, 64, 64, CLASSES)


def run(logdir, steps=STEPS, seed=0, progress=None) -> str:
    """Train the healthy control into logdir/healthy; returns the run directory."""
    torch.manual_seed(seed)
    model = build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    path = run_dir(logdir, NAME)

    # DebugWriter is a SummaryWriter; watch() hooks the model and the optimizer,
    # so every optimizer.step() records one step. Nothing else changes in the loop.
    with DebugWriter(path) as writer:
        writer.watch(model, optimizer=optimizer, criterion=criterion)
        for step, (x, y) in enumerate(classification_batches(steps, seed)):
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            writer.add_scalar("train/loss", loss.item(), step)  # the usual scalars still work
            if progress:
                progress(step + 1, steps)
    return path


if __name__ == "__main__":
    raise SystemExit(main(sys.modules[__name__]))
