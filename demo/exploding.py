"""Exploding gradients after a learning-rate schedule bug.

A StepLR meant to divide the learning rate by 100 at step 100 was given
gamma=100 instead of 0.01. Training is healthy until then; from step 100 each
update overshoots, and the gradients grow step after step (100x in two steps,
1e5x in five) until they overflow and the run turns NaN. The gradients were normal before the change, so the cause is
the learning rate: the report names the pseudo-layer <optimizer>.
"""

import sys
from collections import OrderedDict

import torch
from torch import nn

from tb_neuraldbg import DebugWriter

if __package__:
    from ._common import FEATURES, main, regression_batches, run_dir
else:  # run as a script: python demo/exploding.py
    from _common import FEATURES, main, regression_batches, run_dir

NAME = "exploding"
STEPS = 160
LR_STEP = 100  # where the schedule multiplies the learning rate
EXPECTED = {"kind": "exploding_gradient", "layer": "<optimizer>"}


def build_model() -> nn.Module:
    return nn.Sequential(
        OrderedDict(
            fc1=nn.Linear(FEATURES, 64),
            relu1=nn.ReLU(),
            fc2=nn.Linear(64, 64),
            relu2=nn.ReLU(),
            head=nn.Linear(64, 4),
        )
    )


def run(logdir, steps=STEPS, seed=0, progress=None) -> str:
    """Train with the buggy schedule into logdir/exploding; returns the run directory."""
    torch.manual_seed(seed)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    # The planted bug: gamma=100 (multiply) where 0.01 (divide) was meant.
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=LR_STEP, gamma=100.0)
    criterion = nn.MSELoss()
    path = run_dir(logdir, NAME)
    with DebugWriter(path) as writer:
        writer.watch(model, optimizer=optimizer, criterion=criterion)
        for step, (x, y) in enumerate(regression_batches(steps, seed)):
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            schedule.step()
            writer.add_scalar("train/loss", loss.item(), step)
            if progress:
                progress(step + 1, steps)
    return path


if __name__ == "__main__":
    raise SystemExit(main(sys.modules[__name__]))
