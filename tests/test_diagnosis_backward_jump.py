"""A module whose backward multiplies the gradient (a custom pool that forgets
its 1/L) is where the gradient explodes from the first step, even where the
pooling shrinks the gradient's norm so that what it passes on is just under
ten times the gradients after it, and even once the explosion it starts has
raised the other modules' gains (the reference is the network's median gain
at its first measurement, before any update, when that is lower)."""

from __future__ import annotations

from tb_neuraldbg.diagnosis import Engine
from tests.test_diagnosis import M, failures, feed
from tests.test_gain_units import GainRun


def _pool_forgets_its_mean(run, k="relu1"):
    i = run.i(k)
    after = run.i("fc2")

    def plant(step, r):
        if run.full(step):
            r[i, M["bwd_gain"]] = 16.0
            # it receives a normal gradient; it passes on 9.9x the largest after it
            r[i, M["gout_norm"]] = 0.99 * 10 * r[after, M["gout_norm"]] / 16.0
            if step >= 1:  # the updates it inflates raise the gains of the layers before it
                r[run.i("relu0"), M["bwd_gain"]] = 6.0
                r[run.i("fc1"), M["bwd_gain"]] = 6.0

    return plant


def test_a_pool_whose_backward_forgets_its_mean_is_where_the_gradient_explodes():
    run = GainRun()
    eng = Engine(run.layers)
    feed(eng, run, range(40), _pool_forgets_its_mean(run))
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("exploding_gradient", "relu1", 0)
    assert "backward gain" in rc["message"]


def test_gains_that_rise_together_while_training_are_silent():
    # every module's backward gain drifts up 4x over the run: no module
    # departs from the others, whatever the first median was
    run = GainRun()
    eng = Engine(run.layers)

    def plant(step, r):
        if run.full(step):
            r[1:run.i("<loss>"), M["bwd_gain"]] *= 1.0 + 3.0 * min(1.0, step / 200)

    feed(eng, run, range(300), plant)
    assert failures(eng) == []


def test_a_tiny_received_gradient_is_still_no_explosion():
    # a module ahead of a zero-initialised residual branch: it receives
    # almost nothing and passes on the skip's gradient (gain 1e4, guard kept)
    run = GainRun()
    k = run.i("fc1")

    def plant(step, r):
        if run.full(step):
            r[k, M["gout_norm"]] = 1e-6
            r[k, M["bwd_gain"]] = 3.0 * r[k + 1, M["gout_norm"]] / 1e-6

    eng = Engine(run.layers)
    feed(eng, run, range(60), plant)
    assert failures(eng) == []
