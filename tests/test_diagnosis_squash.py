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

FLOOR = math.log1p(1 / math.e)


def _run(squash="sigmoid", last="Sigmoid"):
    run = Run()
    run.layers[run.i("fc2")]["type"] = last
    if squash is not None:
        run.layers[run.i("<loss>")]["squash"] = squash
    return run


def _squashed(run, gout=0.05, top=0.73, loss=None):
    last = run.i("fc2")

    def plant(step, r):
        if run.full(step):
            r[last, [M["act_mean"], M["act_absmax"], M["gout_norm"]]] = [0.6, top, gout]
        else:
            r[last, M["act_mean"]] = np.nan
        r[run.i("<loss>"), M["value"]] = loss(step) if loss else 0.55 + 0.1 * math.exp(-step / 30)

    return plant


def test_a_sigmoid_fed_to_a_loss_that_squashes_again_is_a_plateau_from_the_first_step():
    run = _run()
    eng = Engine(run.layers)
    feed(eng, run, range(60), _squashed(run))
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("loss_plateau", "<loss>", 0)
    assert f"{FLOOR:.3g}" in rc["message"] and "fc2" in rc["message"]
    assert "BCEWithLogitsLoss" in rc["message"]


def test_the_right_pairing_sigmoid_with_bce_loss_is_silent():
    run = _run(squash=None)
    eng = Engine(run.layers)
    feed(eng, run, range(60), _squashed(run))
    assert failures(eng) == []


def test_a_sigmoid_off_the_gradient_path_is_silent():
    run = _run()
    eng = Engine(run.layers)
    feed(eng, run, range(60), _squashed(run, gout=np.nan))
    assert failures(eng) == []


def test_an_output_that_is_not_a_squashing_is_not_judged_by_its_range():
    # a Linear whose outputs happen to lie in [0, 1] is no squashing
    run = _run(last="Linear")
    eng = Engine(run.layers)
    feed(eng, run, range(60), _squashed(run))
    assert all(e.extra.get("cause") != "sigmoid" for e in eng.events)


def test_a_loss_below_the_floor_ends_the_finding():
    run = _run()
    eng = Engine(run.layers)
    feed(eng, run, range(120), _squashed(run, loss=lambda s: 0.7 * math.exp(-s / 20) + 0.02))
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
