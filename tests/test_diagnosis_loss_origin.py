"""Where the first non-finite value appears when the loss is a plain function
(its value is not recorded): forward -> loss -> backward. Every module's
output finite and the gradient entering the model's output non-finite: the
loss is where it is born (a hand-written ``-(onehot * log(softmax)).sum()``
whose log(0) * 0 is NaN), not the last layer that received it."""

from __future__ import annotations

import numpy as np

from tb_neuraldbg import metadata
from tb_neuraldbg.diagnosis import Engine
from tests.test_diagnosis import Run, failures, feed

M = metadata.METRIC_INDEX
MODS = ["fc0", "relu0", "fc1", "relu1", "fc2"]


def _unseen_loss(run, r):
    """A loss the writer cannot see (a function, not a watched criterion)."""
    r[run.i("<loss>"), [M["value"], M["act_nonfinite"]]] = np.nan


def _nan_from_the_loss(run, r, s, at=41, received=MODS, params=("fc0", "fc1", "fc2")):
    r[1:run.i("<loss>"), M["gout_nonfinite"]] = 0
    if s == at:  # the ``received`` modules got a non-finite output gradient
        r[[run.i(n) for n in received], M["gout_nonfinite"]] = 1
        idx = [run.i(n) for n in params]
        r[idx, M["grad_norm"]] = np.nan
        r[idx, M["grad_nonfinite"]] = 3
    if s > at and received == MODS:  # the update made every weight NaN: the forward is NaN from then on
        r[1:run.i("<loss>"), M["act_nonfinite"]] = 1
        r[[run.i(n) for n in MODS], M["gout_nonfinite"]] = 1


def test_an_unseen_loss_whose_gradient_is_the_first_nonfinite_value_is_the_root():
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        _unseen_loss(run, r)
        _nan_from_the_loss(run, r, s)

    feed(eng, run, range(50), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("nonfinite", "<loss>", 41)
    assert "born in the loss" in rc["message"] and "not recorded" in rc["message"]
    # the layers that received it say so, and are not the root
    fc2 = [e for e in failures(eng) if e.layer == "fc2" and e.step == 41]
    assert fc2 and "received from the layers after it" in fc2[0].message


def test_a_forward_nan_with_an_unseen_loss_stays_the_module_where_it_is_born():
    # the first non-finite value is relu1's output (forward): the loss and
    # every gradient follow from it, the loss is not the origin
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        _unseen_loss(run, r)
        _nan_from_the_loss(run, r, s)
        if s == 41:
            r[[run.i("relu1"), run.i("fc2")], M["act_nonfinite"]] = 1

    feed(eng, run, range(50), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("nonfinite", "relu1", 41)
    assert all(e.layer != "<loss>" for e in failures(eng))


def test_a_module_backward_with_an_unseen_loss_stays_the_module():
    # fc2 received a finite gradient and passed on a non-finite one: born in fc2's backward
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        _unseen_loss(run, r)
        _nan_from_the_loss(run, r, s, received=("fc0", "relu0", "fc1", "relu1"), params=("fc0", "fc1"))

    feed(eng, run, range(50), plant)
    assert eng.root_cause["layer"] == "fc2"
    assert all(e.layer != "<loss>" for e in failures(eng))


def test_an_unseen_loss_with_finite_gradients_is_silent():
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        _unseen_loss(run, r)
        r[1:run.i("<loss>"), M["gout_nonfinite"]] = 0

    feed(eng, run, range(120), plant)
    assert failures(eng) == []
