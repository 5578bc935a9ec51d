"""The loss of predicting the label frequencies (``prior_loss``,
docs/FORMAT.md): a classifier's trivial predictor, counted over the run's
targets by ``LabelFrequencies``."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tb_neuraldbg.training.hooks.pseudo_rows import LabelFrequencies


def _entropy(p):
    return -sum(q * math.log(q) for q in p if q > 0)


def _one(criterion, x, y):
    return LabelFrequencies().add(criterion, (x, y))


def test_class_indices_give_the_entropy_of_their_frequencies_with_the_histogram_correction():
    y = torch.tensor([0] * 70 + [1] * 20 + [2] * 10)
    got = float(_one(nn.CrossEntropyLoss(), torch.randn(100, 4), y))
    # three classes seen among 100 targets: Miller-Madow adds (3 - 1) / 200
    assert got == pytest.approx(_entropy([0.7, 0.2, 0.1]) + 2 / 200, rel=1e-5)


def test_frequencies_are_counted_over_the_run_not_one_small_batch():
    """Batches of 4 among 4 balanced classes: one batch's histogram says
    ~1.0 nats, the run's says ln 4 (a healthy classifier at batch 4 is not
    'stuck at its labels' entropy')."""
    freq = LabelFrequencies()
    g = torch.Generator().manual_seed(0)
    first = float(freq.add(nn.CrossEntropyLoss(), (torch.randn(4, 4), torch.randint(0, 4, (4,), generator=g))))
    for _ in range(200):
        last = float(freq.add(nn.CrossEntropyLoss(), (torch.randn(4, 4), torch.randint(0, 4, (4,), generator=g))))
    assert first < 1.3 and last == pytest.approx(math.log(4), abs=0.02)


def test_ignored_targets_and_label_smoothing_are_those_of_the_criterion():
    y = torch.tensor([0, 0, 0, 1, -100, -100])
    got = float(_one(nn.CrossEntropyLoss(), torch.randn(6, 2), y))
    assert got == pytest.approx(_entropy([0.75, 0.25]) + 1 / 8, rel=1e-5)
    smooth = float(_one(nn.CrossEntropyLoss(label_smoothing=0.2), torch.randn(6, 2), y))
    assert smooth == pytest.approx(_entropy([0.8 * 0.75 + 0.1, 0.8 * 0.25 + 0.1]), rel=1e-5)


def test_class_probabilities_are_averaged_over_samples_and_positions():
    y = torch.tensor([[1.0, 0.0], [0.5, 0.5]])[:, :, None].expand(2, 2, 3)  # [B, K, positions]
    got = float(_one(nn.CrossEntropyLoss(), torch.randn(2, 2, 3), y))
    assert got == pytest.approx(_entropy([0.75, 0.25]), rel=1e-5)


def test_binary_targets_give_the_binary_entropy_of_their_mean():
    y = torch.zeros(4, 1, 5, 5)
    y[:, :, :1] = 1.0  # a fifth of the pixels
    got = float(_one(nn.BCEWithLogitsLoss(), torch.randn(4, 1, 5, 5), y))
    assert got == pytest.approx(_entropy([0.2, 0.8]), rel=1e-5)
    assert math.isnan(float(_one(nn.BCEWithLogitsLoss(), torch.randn(4, 1, 5, 5), 255 * y)))


@pytest.mark.parametrize("criterion", [nn.MSELoss(), nn.CrossEntropyLoss(weight=torch.ones(2)),
                                       nn.CrossEntropyLoss(reduction="sum"),
                                       nn.BCEWithLogitsLoss(pos_weight=torch.ones(1))])
def test_other_criteria_have_none(criterion):
    x, y = torch.randn(8, 2), torch.randint(0, 2, (8,))
    if isinstance(criterion, (nn.MSELoss, nn.BCEWithLogitsLoss)):
        y = torch.rand(8, 2) if isinstance(criterion, nn.MSELoss) else torch.rand(8, 1)
        x = torch.randn(*y.shape)
    assert _one(criterion, x, y) is None
