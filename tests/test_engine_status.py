"""When a standing warning makes a run "failing" (DESIGN.md, *Severity and
status*; engine.Engine.status).

Saturated or dead units, and updates partly rounded away, say how well a
layer's units or weights work; while the loss keeps falling clearly after
they began, the run learns: "healthy, with warnings", the finding still
named. A loss that stops falling with them, or a warning that says the model
stopped learning (vanishing gradients), keeps the run failing.
"""

from __future__ import annotations

import numpy as np
import pytest

from tb_neuraldbg import metadata
from tb_neuraldbg.diagnosis import Engine
from tests.test_diagnosis import Run, feed

M = metadata.METRIC_INDEX


def _saturating(loss_after, kind="saturated_activation", steps=400, onset=100):
    """An MLP whose second activation (a Tanh) saturates from ``onset`` on
    (or whose fc1 gradient vanishes, ``kind="vanishing_gradient"``), the loss
    after it given by ``loss_after(step)``."""
    run = Run()
    layers = list(run.layers)
    layers[run.i("relu1")] = {"name": "relu1", "type": "Tanh"}
    eng = Engine(layers)
    li = run.i("<loss>")
    level = {}

    def plant(s, r):
        if run.full(s):
            r[run.i("relu1"), M["act_dead_frac"]] = np.nan
            r[run.i("relu1"), M["act_sat_frac"]] = 0.02
            if kind == "saturated_activation" and s >= onset:
                r[run.i("relu1"), M["act_sat_frac"]] = 0.9
        if kind == "vanishing_gradient" and s >= onset:
            r[run.i("fc0"), M["grad_norm"]] *= 1e-5
        if s == onset:
            level["at"] = float(r[li, M["value"]])
        if s >= onset:
            r[li, M["value"]] = loss_after(s - onset, level["at"]) + 0.02 * run.rng.random()

    feed(eng, run, range(steps), plant)
    eng.finish()
    return eng


def _falls(k, at):
    return at * np.exp(-k / 60)


def _flat(k, at):
    return at


def test_units_that_saturate_while_the_loss_keeps_falling_are_healthy_with_warnings():
    eng = _saturating(_falls)
    assert eng.root_cause is not None and eng.root_cause["kind"] == "saturated_activation"
    assert eng.status == "healthy"


def test_units_that_saturate_as_the_loss_stops_falling_are_failing():
    eng = _saturating(_flat)
    assert eng.root_cause is not None and eng.root_cause["kind"] == "saturated_activation"
    assert eng.status == "failing"


@pytest.mark.parametrize("loss_after", [_falls, _flat])
def test_vanishing_gradients_stay_failing_whatever_the_loss(loss_after):
    eng = _saturating(loss_after, kind="vanishing_gradient")
    assert eng.root_cause is not None and eng.root_cause["kind"] == "vanishing_gradient", eng.root_cause
    assert eng.status == "failing"


def _group_zero_at_lr_zero(loss_of):
    """fc0 alone in param group 0 at lr 0 from the start (a pretrained
    embedding held fixed on purpose), fc1 and fc2 in group 1 at the run's
    rate; the loss given by ``loss_of(step, rng)``. The finished engine."""
    from tests.test_diagnosis_rules import _facts

    run = Run()
    eng = Engine(run.layers)
    li = run.i("<loss>")

    def plant(s, r):
        _facts(run, r, group={"fc0": 0, "fc1": 1, "fc2": 1}, lr={"fc0": 0.0})
        r[run.i("fc0"), M["update_ratio"]] *= 0.0
        r[li, M["value"]] = loss_of(s, run.rng)

    feed(eng, run, range(400), plant)
    eng.finish()
    return eng


def test_a_group_held_at_rate_0_while_the_rest_learns_is_a_warning():
    """The loss falls from 1.4 to 0.2 while group 0 never moves: healthy,
    with the frozen layer named (its rate is the one the user set)."""
    eng = _group_zero_at_lr_zero(lambda s, rng: 1.2 * np.exp(-s / 100) + 0.2 + 0.02 * rng.random())
    assert eng.root_cause["kind"] == "frozen_weights" and eng.root_cause["layer"] == "fc0"
    assert eng.status == "healthy"


def test_a_group_held_at_rate_0_while_the_loss_stays_is_a_failure():
    """The same when the loss never falls (the first group's rate of 0 does
    not make the run "frozen": the other group trains, so the plateau is
    judged too)."""
    eng = _group_zero_at_lr_zero(lambda s, rng: 1.4 + 0.02 * rng.random())
    assert eng.status == "failing"
    assert any(e.kind == "loss_plateau" for e in eng.events)
