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
