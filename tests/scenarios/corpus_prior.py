"""Scenarios of a classifier that learned only how often each label occurs.

The trivial predictor of a classifier is the batch's label frequencies, the
same for every sample: its loss is their entropy, ln K only when the classes
are balanced. A label pipeline that pairs each input with another sample's
label (labels shuffled apart from their inputs, a sort on one side only)
leaves a model nothing to learn but those frequencies: its loss falls from
ln K to their entropy and stays there, below ln K, so "stuck at chance" never
fires. The root is ``<loss>`` (``aspects/loss.py``, the writer's
``prior_loss``). The healthy controls: the same imbalanced task learned (its
twin), and the same task under label smoothing, whose floor is higher.
Reports: "model always predicts the majority class" (Humbatova et al. ICSE
2020, "training data"; https://discuss.pytorch.org/t/model-predicts-only-one-class/48566).
test_scenarios.py runs both.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .failures import Case
from .harness import Spec

_DIM, _K, _STEPS = 16, 4, 240
#: the classes' frequencies: imbalanced, entropy 0.80 nats against ln 4 = 1.39
_FREQ = torch.tensor([0.7, 0.15, 0.1, 0.05])


def _imbalanced(aligned: bool, batch=32, seed=5):
    """Inputs [B, 16] whose class (drawn with the frequencies ``_FREQ``) sets
    their mean; ``aligned=False`` pairs each input with another sample's
    label (a permutation of the batch)."""
    centres = torch.randn(_K, _DIM, generator=torch.Generator().manual_seed(seed)) * 1.5

    def batch_fn(step):
        g = torch.Generator().manual_seed(seed * 100_000 + step)
        y = torch.multinomial(_FREQ, batch, replacement=True, generator=g)
        x = centres[y] + torch.randn(batch, _DIM, generator=g)
        if not aligned:
            y = y[torch.randperm(batch, generator=g)]
        return x, y

    return batch_fn


def _mlp():
    return nn.Sequential(nn.Linear(_DIM, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, _K))


def mlp_imbalanced_labels_shuffled_apart():
    """An MLP on 4 imbalanced classes whose labels are shuffled apart from
    their inputs: the loss falls from ln 4 to the labels' entropy (~0.8) in a
    few dozen steps and stays there while its twin's falls far below."""
    def spec(bug):
        def build():
            model = _mlp()
            return model, torch.optim.Adam(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), None

        return Spec(f"mlp_imbalanced_labels_shuffled_apart{'' if bug else '_fixed'}", build,
                    _imbalanced(aligned=not bug), steps=_STEPS, num_classes=_K)

    def truth(bug, fixed):
        prior = -float((_FREQ * _FREQ.log()).sum())
        late, late_fixed = np.mean(bug.losses[-40:]), np.mean(fixed.losses[-40:])
        assert abs(late - prior) < 0.1 * prior, (late, prior)  # at the frequencies' loss
        assert late < 0.8 * np.log(_K), late  # well below chance: the ln K rule cannot see it
        assert late_fixed < 0.5 * prior, late_fixed
        _, measured = bug.series("<loss>", "prior_loss")
        assert abs(np.nanmedian(measured) - prior) < 0.1 * prior, (np.nanmedian(measured), prior)

    return Case(spec(True), ("loss_plateau",), "<loss>", 40, tolerance=40, fixed=spec(False), truth=truth)


def mlp_imbalanced_label_smoothing():
    """Healthy: the same task learned under label smoothing 0.2, whose loss
    floor sits far above 0 (and closer to the frequencies' loss)."""
    def build():
        model = _mlp()
        return (model, torch.optim.Adam(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(label_smoothing=0.2),
                None)

    return Spec("mlp_imbalanced_label_smoothing", build, _imbalanced(aligned=True), steps=_STEPS, num_classes=_K)


def all_cases():
    """Every failing scenario of this module."""
    return [mlp_imbalanced_labels_shuffled_apart()]


def all_specs():
    """Every healthy run of this module (the failing case's twin is run with it)."""
    return [mlp_imbalanced_label_smoothing()]
