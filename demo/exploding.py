"""Exploding gradients after a learning-rate schedule bug.

A StepLR meant to divide the learning rate by 100 at step 100 was given
gamma=100 instead of 0.01. Training is healthy until then; from step 100 each
update overshoots, and the gradients grow step after step (100x in two steps,
1e5x in five) until they overflow and the run turns NaN. The gradients were normal before the change, so the cause is
the learning rate: the report names the pseudo-layer <optimizer>.
"""

import sys

import torch
from torch import nn

from tb_neuraldbg import DebugWriter

if __package__:
    from ._common import FEATURES, fit, main, mlp, regression_batches, run_dir
else:  # run as a script: python demo/exploding.py
    from _common import FEATURES, fit, main, mlp, regression_batches, run_dir

NAME = "exploding"
STEPS = 160
LR_STEP = 100  # where the schedule multiplies the learning rate
EXPECTED = {"kind": "exploding_gradient", "layer": "<optimizer>"}


def build_model() -> nn.Module:
    return mlp(FEATURES, 64, 64, 4)  # fc1, relu1, fc2, relu2, head


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
        # The schedule steps after every optimizer step, so step_size counts steps.
        fit(writer, model, optimizer, criterion, regression_batches(steps, seed), steps, progress,
            after_step=schedule.step)
    return path


if __name__ == "__main__":
    raise SystemExit(main(sys.modules[__name__]))
