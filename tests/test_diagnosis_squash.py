"""An output already squashed into [0, 1] fed to a criterion that squashes
it again (a Sigmoid before BCEWithLogitsLoss): the loss cannot fall below
ln(1 + 1/e). The writer records what the criterion squashes with on the
``<loss>`` layer (``squashing_of``); the diagnosis finds a loss_plateau at
<loss> from the first full step where the module feeding the loss squashes
into [0, 1] by its type, and stays silent for the right pairing (BCELoss),
off the gradient path, and once the loss goes below that floor."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from tb_neuraldbg.diagnosis import Engine
from tb_neuraldbg.training.hooks.pseudo_rows import squashing_of
from tests.test_diagnosis import M, Run, failures, feed
from tests.test_diagnosis_probabilities import _probs

FLOOR = math.log1p(1 / math.e)


def _run(squash="sigmoid", last="Sigmoid"):
    run = Run()
    run.layers[run.i("fc2")]["type"] = last
    if squash is not None:
        run.layers[run.i("<loss>")]["squash"] = squash
    return run


def test_a_sigmoid_fed_to_a_loss_that_squashes_again_is_a_plateau_from_the_first_step():
    run = _run()
    eng = Engine(run.layers)
    feed(eng, run, range(60), _probs(run, mean=0.6))
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("loss_plateau", "<loss>", 0)
    assert f"{FLOOR:.3g}" in rc["message"] and "fc2" in rc["message"]
    assert "BCEWithLogitsLoss" in rc["message"]


def test_the_right_pairing_sigmoid_with_bce_loss_is_silent():
    run = _run(squash=None)
    eng = Engine(run.layers)
    feed(eng, run, range(60), _probs(run, mean=0.6))
    assert failures(eng) == []


def test_a_sigmoid_off_the_gradient_path_is_silent():
    run = _run()
    eng = Engine(run.layers)
    feed(eng, run, range(60), _probs(run, mean=0.6, gout=np.nan))
    assert failures(eng) == []


def test_an_output_that_is_not_a_squashing_is_not_judged_by_its_range():
    # a Linear whose outputs happen to lie in [0, 1] is no squashing
    run = _run(last="Linear")
    eng = Engine(run.layers)
    feed(eng, run, range(60), _probs(run, mean=0.6))
    assert all(e.extra.get("cause") != "sigmoid" for e in eng.events)


def test_a_loss_below_the_floor_ends_the_finding():
    run = _run()
    eng = Engine(run.layers)
    feed(eng, run, range(120), _probs(run, mean=0.6, loss=lambda s: 0.7 * math.exp(-s / 20) + 0.02))
    plateau = [e for e in eng.events if e.layer == "<loss>" and e.kind == "loss_plateau"]
    assert plateau and plateau[-1].to_state == "healthy"
    assert eng.status == "healthy"


@pytest.mark.parametrize("criterion, squash", [
    (nn.CrossEntropyLoss(), "softmax"),
    (nn.BCEWithLogitsLoss(), "sigmoid"),
    (nn.MultiLabelSoftMarginLoss(), "sigmoid"),
    (nn.BCELoss(), None),
    (nn.MSELoss(), None),
    (nn.NLLLoss(), None),
    (nn.BCEWithLogitsLoss(pos_weight=torch.tensor([3.0])), None),  # the weight moves the floor
    (nn.CrossEntropyLoss(reduction="sum"), None),  # the batch size scales it
])
def test_what_the_criterion_squashes_with(criterion, squash):
    assert squashing_of(criterion) == squash


# -------------------------------------------- an output that cannot reach its targets


def _regression(run, tmin=-2.5, tmax=2.5, tv=1.0, gout=0.05, loss=None):
    last, i = run.i("fc2"), run.i("<loss>")

    def plant(step, r):
        if run.full(step):
            r[last, M["gout_norm"]] = gout
            r[i, [M["target_min"], M["target_max"], M["target_var"]]] = [tmin, tmax, tv]
        r[i, M["value"]] = loss(step) if loss else 0.5 + 0.4 * math.exp(-step / 30)

    return plant


def test_a_relu_output_on_targets_below_zero_cannot_reach_them():
    run = _run(squash=None, last="ReLU")
    eng = Engine(run.layers)
    feed(eng, run, range(60), _regression(run))
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("loss_plateau", "<loss>", 0)
    assert "never below 0" in rc["message"] and "-2.5" in rc["message"] and "fc2" in rc["message"]


def test_a_sigmoid_output_on_targets_above_one_cannot_reach_them():
    run = _run(squash=None, last="Sigmoid")
    eng = Engine(run.layers)
    feed(eng, run, range(60), _regression(run, tmin=0.0, tmax=40.0, tv=100.0))
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"]) == ("loss_plateau", "<loss>")
    assert "never above 1" in rc["message"] and "40" in rc["message"]


@pytest.mark.parametrize("last, tmin, tmax, tv", [
    ("ReLU", 0.0, 12.0, 9.0),  # counts: non-negative targets
    ("ReLU", -0.2, 12.0, 9.0),  # below the bound by much less than their spread
    ("Linear", -2.5, 2.5, 1.0),  # no bound
    ("Sigmoid", 0.0, 1.0, 0.2),  # targets in the squashing's range
])
def test_targets_within_reach_are_silent(last, tmin, tmax, tv):
    run = _run(squash=None, last=last)
    eng = Engine(run.layers)
    feed(eng, run, range(60), _regression(run, tmin, tmax, tv))
    assert failures(eng) == []


def test_a_bounded_output_off_the_gradient_path_is_not_judged():
    run = _run(squash=None, last="ReLU")
    eng = Engine(run.layers)
    feed(eng, run, range(60), _regression(run, gout=np.nan))
    assert failures(eng) == []


@pytest.mark.slow
def test_the_writer_records_the_targets_range(tmp_path):
    """target_min and target_max from a real DebugWriter under MSELoss on
    full steps; NaN for another criterion."""
    from scenarios.harness import Spec, train

    def build(crit):
        def f():
            model = nn.Sequential(nn.Linear(3, 1))
            return model, torch.optim.SGD(model.parameters(), lr=0.01), crit, None
        return f

    def data(step):
        g = torch.Generator().manual_seed(step)
        return torch.randn(16, 3, generator=g), 3.0 * torch.randn(16, 1, generator=g) - 1.0

    got = train(Spec("mse", build(nn.MSELoss()), data, steps=3), str(tmp_path / "a"))
    _, lo = got.series("<loss>", "target_min")
    _, hi = got.series("<loss>", "target_max")
    assert np.allclose(lo, [data(s)[1].min().item() for s in range(3)], rtol=1e-6)
    assert np.allclose(hi, [data(s)[1].max().item() for s in range(3)], rtol=1e-6)
    got = train(Spec("l1", build(nn.L1Loss()), data, steps=2), str(tmp_path / "b"))
    assert np.isnan(got.series("<loss>", "target_min")[1]).all()
