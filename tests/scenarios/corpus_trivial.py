"""Scenarios of a regression that never learned even its targets' mean.

A model that learns learns the constant first: its output's bias reaches the
targets' mean within a few dozen steps, and the loss falls to their variance
(the trivial predictor's loss, the writer's ``target_var``) before it falls
below. Updates too small to move the model (a rate far too low, gradients
clipped to almost nothing) leave the loss drifting down from far above
that level: it falls, so "never fell" does not fire, and it is not flat. At
the end of the run it is still clearly above what a constant prediction
gives: a plateau from step 0 (``aspects/loss.py``, ``Plateau.decide``,
reason ``above_trivial``). The healthy control starts as far above and,
with a warmup that keeps its first steps as small, ends below.
Reports: "loss decreasing very slowly, model not learning" (PyTorch forum,
https://discuss.pytorch.org/t/loss-decreasing-very-slowly/55347;
Humbatova et al. ICSE 2020, "suboptimal learning rate").
test_scenarios.py runs both.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .failures import Case
from .harness import Spec

_STEPS, _T = 200, 32
#: the targets' offset: far from the random model's output near 0
_OFFSET = 4.0


def _signals(batch=32, seed=3):
    """Series [B, 1, 32] and a target each: the offset plus a smooth function
    of the series (learnable by a small conv net)."""
    def batch_fn(step):
        g = torch.Generator().manual_seed(seed * 100_000 + step)
        f = 0.5 + torch.rand(batch, 1, 1, generator=g)
        x = torch.sin(f * torch.arange(_T).float()) + 0.1 * torch.randn(batch, 1, _T, generator=g)
        return x, _OFFSET + 2.0 * (f[:, :, 0] - 1.0)

    return batch_fn


def _conv():
    return nn.Sequential(nn.Conv1d(1, 8, 5, padding=2), nn.ReLU(), nn.Conv1d(8, 8, 5, padding=2), nn.ReLU(),
                         nn.Flatten(), nn.Linear(8 * _T, 1))


def conv1d_regression_rate_far_too_low():
    """A 1-D conv regression trained by SGD at 1e-4, a hundredth of the rate
    it needs: its loss falls from ~16 by a fifth but is still many times the targets'
    variance at the end, while its twin (1e-2) falls below it."""
    def spec(bug):
        def build():
            model = _conv()
            return model, torch.optim.SGD(model.parameters(), lr=1e-4 if bug else 1e-2), nn.MSELoss(), None

        return Spec(f"conv1d_regression_rate_far_too_low{'' if bug else '_fixed'}", build, _signals(), steps=_STEPS)

    def truth(bug, fixed):
        _, tv = bug.series("<loss>", "target_var")
        var = float(np.nanmedian(tv))
        late, late_fixed = np.mean(bug.losses[-20:]), np.mean(fixed.losses[-20:])
        assert bug.losses[0] > 10 * var and late < 0.9 * bug.losses[0], (bug.losses[0], late, var)  # it fell ...
        assert late > 10 * var, (late, var)  # ... but not even to the mean's loss
        assert late_fixed < var, (late_fixed, var)

    return Case(spec(True), ("loss_plateau",), "<loss>", 0, fixed=spec(False), truth=truth)


def conv1d_regression_offset_targets_warmup():
    """Healthy: the same task by Adam with a 50-step linear warmup from 0:
    its first steps move it as little, its loss starts as far above the
    targets' variance and ends below it."""
    def build():
        model = _conv()
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        return model, opt, nn.MSELoss(), torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / 50))

    return Spec("conv1d_regression_offset_targets_warmup", build, _signals(), steps=_STEPS)


def all_cases():
    """Every failing scenario of this module."""
    return [conv1d_regression_rate_far_too_low()]


def all_specs():
    """Every healthy run of this module (the failing case's twin is run with it)."""
    return [conv1d_regression_offset_targets_warmup()]
