"""A parameter without a gradient on some steps but with one on others does
pass gradient: ``no_gradient`` needs a streak of steps without one that is
long enough to say "never" (``persist_vanishing``, and more than twice the
row's longest earlier gap), not one step."""

from __future__ import annotations

import numpy as np

from tb_neuraldbg import metadata
from tb_neuraldbg.diagnosis import Engine
from tests.test_diagnosis import Run, failures, feed

M = metadata.METRIC_INDEX


def _no_grad(run, r, name):
    i = run.i(name)
    r[i, M["grad_missing"]] = 2
    r[i, [M["grad_norm"], M["update_ratio"]]] = np.nan


def test_a_head_trained_every_fourth_step_is_silent():
    run = Run()
    for first in (0, 3):  # trained from the first step, or from the fourth
        eng = Engine(run.layers)
        feed(eng, run, range(200), lambda s, r: (s % 4 != first % 4) and _no_grad(run, r, "fc2"))
        assert failures(eng) == [], first


def test_a_layer_that_loses_its_gradient_mid_run_has_none_from_then():
    run = Run()
    eng = Engine(run.layers)
    feed(eng, run, range(120), lambda s, r: s >= 60 and _no_grad(run, r, "fc1"))
    (ev,) = failures(eng)
    assert (ev.kind, ev.layer, ev.step) == ("no_gradient", "fc1", 60)


def test_a_long_gap_after_an_intermittent_schedule_is_judged_against_it():
    # a gradient every 4th step, then none from step 100: a gap far longer
    # than any before (more than twice the longest) is a cut
    run = Run()
    eng = Engine(run.layers)
    feed(eng, run, range(160), lambda s, r: (s >= 100 or s % 4) and _no_grad(run, r, "fc2"))
    (ev,) = failures(eng)
    assert (ev.kind, ev.layer, ev.step) == ("no_gradient", "fc2", 97)


def test_a_layer_without_a_gradient_from_the_first_step_is_still_found_there():
    run = Run()
    eng = Engine(run.layers)
    feed(eng, run, range(20), lambda s, r: _no_grad(run, r, "fc0"))
    assert eng.root_cause["kind"] == "no_gradient" and eng.root_cause["step"] == 0
