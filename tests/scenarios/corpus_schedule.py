"""Scenarios of a schedule that stops the optimizer: the rate a schedule
took to exactly 0 while training goes on.

``PolynomialLR(total_iters=N)`` holds the rate at 0 once it reaches step N:
given the steps of one epoch (or epochs while it is stepped every batch), it
stops every weight for the rest of the run, with no error and a loss that
simply stops falling. The root is ``<optimizer>`` where the rate reached 0
(``aspects/weight.py``, ``Moves``). Its fixed twin decays to 0 exactly at the
run's end, as a schedule should: the healthy control of "a decay to 0 is a
collapse only when training goes on long after it". Reports: the linear
schedule's "Training beyond specified 't_total'. Learning rate multiplier set
to 0" (deepset-ai/FARM#46); PyTorch's PolynomialLR docs (the rate stays at
0 after total_iters). test_scenarios.py runs both.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .failures import Case
from .harness import Spec
from .models import images

_STEPS = 200


class _ConvNet(nn.Module):
    """Conv2d -> ReLU -> Conv2d (stride 2) -> ReLU -> Linear (4 classes)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.act2 = nn.ReLU()
        self.head = nn.Linear(16 * 6 * 6, 4)

    def forward(self, x):
        return self.head(self.act2(self.conv2(self.act1(self.conv1(x)))).flatten(1))


def conv_polynomial_schedule_total_one_epoch():
    """A conv classifier under SGD with momentum and a linear
    ``PolynomialLR`` whose ``total_iters`` is 50 batches (one epoch) in a run
    of 200: the rate is 0 from step 50, nothing moves after it, and the loss
    ends far above its twin's (whose decay reaches 0 at step 200)."""
    def spec(bug):
        def build():
            model = _ConvNet()
            opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
            total = 50 if bug else _STEPS
            return model, opt, nn.CrossEntropyLoss(), torch.optim.lr_scheduler.PolynomialLR(opt, total, power=1.0)

        return Spec(f"conv_polynomial_schedule_total_one_epoch{'' if bug else '_fixed'}", build,
                    images(scale=0.5), steps=_STEPS, num_classes=4)

    def truth(bug, fixed):
        # the bug's weights do not move after step 50; the twin's do to the end
        steps, ratio = bug.series("conv1", "update_ratio")
        late = ratio[(steps > 60) & np.isfinite(ratio)]
        assert len(late) and np.all(late == 0), late
        steps_f, ratio_f = fixed.series("conv1", "update_ratio")
        assert np.nanmedian(ratio_f[(steps_f > 60) & (steps_f < 180)]) > 0, ratio_f
        assert np.mean(bug.losses[-20:]) > 1.2 * np.mean(fixed.losses[-20:]), (bug.losses[-5:], fixed.losses[-5:])

    return Case(spec(True), ("frozen_weights",), "<optimizer>", 50, tolerance=10, fixed=spec(False), truth=truth)


def all_cases():
    """Every failing scenario of this module."""
    return [conv_polynomial_schedule_total_one_epoch()]


def all_specs():
    """Every healthy run of this module (the failing case's twin is run with it)."""
    return []
