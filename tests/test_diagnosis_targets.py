"""Targets outside the criterion's domain (issue #42): a criterion that
takes probabilities (CrossEntropyLoss, BCE) given a target below 0 or above
1 has no floor; its loss falls below 0 by driving the logits to infinity.
The writer records the targets' range (``target_min``, ``target_max``) and
the ``<loss>`` layer's ``"targets": "probabilities"``; the loss aspect
names ``data_anomaly @ <loss>`` from the first such batch. Soft targets in
[0, 1] (label smoothing, mixup, distillation) and class indices stay silent."""

from __future__ import annotations

import math

import numpy as np

import pytest
import torch
from torch import nn

from tb_neuraldbg import DebugWriter
from tb_neuraldbg.offline.reader import read_run
from tb_neuraldbg.offline.rediagnose import diagnose_run
from tb_neuraldbg.training.hooks.pseudo_rows import loss_layer_extras, target_range
from tests.test_diagnosis import M


def test_probability_criteria_say_so_and_others_do_not():
    for crit in (nn.CrossEntropyLoss(), nn.BCEWithLogitsLoss(pos_weight=torch.ones(1)), nn.BCELoss(),
                 nn.MultiLabelSoftMarginLoss()):
        assert loss_layer_extras(crit)["targets"] == "probabilities"
    for crit in (nn.MSELoss(), nn.NLLLoss(), nn.GaussianNLLLoss()):
        assert "targets" not in loss_layer_extras(crit)
    assert loss_layer_extras(nn.BCEWithLogitsLoss())["squash"] == "sigmoid"


def test_the_range_is_that_of_floating_targets_only():
    x = torch.randn(6, 3)
    soft = torch.softmax(torch.randn(6, 3), dim=1)
    lo, hi = target_range(nn.CrossEntropyLoss(), (x, soft)).tolist()
    assert (lo, hi) == (pytest.approx(float(soft.min())), pytest.approx(float(soft.max())))
    assert target_range(nn.CrossEntropyLoss(), (x, torch.tensor([0, 2, 1, 1, 0, 2]))) is None  # class indices
    assert target_range(nn.BCEWithLogitsLoss(), (x, 2 * torch.randint(0, 2, (6, 3)).float() - 1)).tolist() == [-1, 1]


def _train(logdir, targets_of, criterion, steps=40):
    """A small binary classifier trained with ``criterion`` on ``targets_of(y)``
    (y in {0, 1}, learnable from the inputs); its report."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    with DebugWriter(str(logdir)) as w:
        w.watch(model, optimizer=opt, criterion=criterion)
        for _ in range(steps):
            x = torch.randn(64, 8, generator=g)
            y = (x[:, :1] + 0.5 * x[:, 1:2] > 0).float()
            loss = criterion(model(x), targets_of(y))
            opt.zero_grad()
            loss.backward()
            opt.step()
    run = read_run(str(logdir))
    return run, diagnose_run(run).to_report()


def test_labels_in_minus_one_plus_one_are_named_at_the_loss_from_step_0(tmp_path):
    run, rep = _train(tmp_path, lambda y: 2 * y - 1, nn.BCEWithLogitsLoss())
    loss = list(run.layer_names).index("<loss>")
    assert run.stats[0, loss, M["target_min"]] == -1.0 and run.stats[0, loss, M["target_max"]] == 1.0
    rc = rep["root_cause"]
    assert (rc["kind"], rc["layer"], rc["step"]) == ("data_anomaly", "<loss>", 0)
    assert "[0, 1]" in rc["message"] and "-1" in rc["message"]


@pytest.mark.parametrize("targets_of", [lambda y: y, lambda y: 0.9 * y + 0.05, lambda y: torch.full_like(y, 0.5) * y],
                         ids=["hard", "smoothed", "soft"])
def test_targets_in_zero_one_stay_silent(tmp_path, targets_of):
    run, rep = _train(tmp_path, targets_of, nn.BCEWithLogitsLoss())
    assert rep["status"] == "healthy", rep["root_cause"]
    loss = list(run.layer_names).index("<loss>")
    assert not math.isnan(run.stats[0, loss, M["target_max"]])  # measured, and judged in its domain


def test_a_recorded_total_of_more_terms_is_not_judged_against_the_criterions_trivial_loss(tmp_path):
    """A VAE-like loop: the watched MSELoss's reconstruction plus a KL-like term
    of ~1 nat, recorded with ``record(loss=total)``. The total sits far
    above the targets' variance by design: that level (target_var) is the
    criterion's, not the total's, so it is not recorded for those steps
    and the run is not "worse than a constant prediction"."""
    torch.manual_seed(0)
    enc, dec = nn.Linear(16, 4), nn.Linear(4, 16)
    model = nn.Sequential(enc, dec)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    crit = nn.MSELoss()
    g = torch.Generator().manual_seed(0)
    with DebugWriter(str(tmp_path)) as w:
        w.watch(model, optimizer=opt, criterion=crit)
        for _ in range(200):
            x = torch.randn(32, 16, generator=g)
            total = crit(model(x), x) + 1.0 + 0.01 * enc.weight.pow(2).sum()
            opt.zero_grad()
            total.backward()
            w.record(loss=total)
            opt.step()
    run = read_run(str(tmp_path))
    loss = list(run.layer_names).index("<loss>")
    assert np.isnan(run.stats[:, loss, M["target_var"]]).all()
    assert np.isfinite(run.stats[0, loss, M["value"]]) and run.stats[-1, loss, M["value"]] > 1.5
    rep = diagnose_run(run).to_report()
    assert rep["status"] == "healthy", rep["root_cause"]
