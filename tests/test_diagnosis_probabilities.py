"""A K-class cross-entropy fed probabilities (a Softmax as the model's last
layer before CrossEntropyLoss): the model's output on the loss's gradient
path has every value in [0, 1] and a mean of exactly 1/K at every full
measurement, and the loss cannot fall below ln(1 + (K-1)/e). A loss_plateau
at <loss> from the fingerprint's first step; silent where the probabilities
are off the gradient path, where the mean is 1/K only by chance, and where
the loss goes below that floor."""

from __future__ import annotations

import math

import numpy as np

from tb_neuraldbg.diagnosis import Engine
from tests.test_diagnosis import M, Run, failures, feed

K = 10


def _ce_run():
    """A run whose criterion applies log-softmax itself (CrossEntropyLoss:
    the writer records ``squash`` "softmax" on <loss>)."""
    run = Run()
    run.layers[run.i("<loss>")]["squash"] = "softmax"
    return run


def _probs(run, mean=1.0 / K, gout=0.05, loss=None):
    last = run.i("fc2")

    def plant(step, r):
        if run.full(step):
            r[last, [M["act_mean"], M["act_absmax"], M["gout_norm"]]] = [mean(step) if callable(mean) else mean,
                                                                        0.3, gout]
        else:
            r[last, M["act_mean"]] = np.nan
        r[run.i("<loss>"), M["value"]] = loss(step) if loss else 1.8 + 0.5 * math.exp(-step / 30)

    return plant


def test_probabilities_fed_to_a_cross_entropy_are_a_plateau_from_the_first_step():
    run = _ce_run()
    eng = Engine(run.layers, num_classes=K)
    feed(eng, run, range(60), _probs(run))
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("loss_plateau", "<loss>", 0)
    assert "probability distribution" in rc["message"] and "1.46" in rc["message"]
    assert "Softmax" in rc["message"]


def test_probabilities_off_the_gradient_path_are_silent():
    # a Softmax kept for the metrics: its output gets no gradient
    run = _ce_run()
    eng = Engine(run.layers, num_classes=K)
    feed(eng, run, range(60), _probs(run, gout=np.nan))
    assert failures(eng) == []


def test_a_mean_near_one_over_k_by_chance_is_silent():
    run = _ce_run()
    eng = Engine(run.layers, num_classes=K)
    feed(eng, run, range(80), _probs(run, mean=lambda s: 1.0 / K if s in (0, 20) else 0.3))
    assert failures(eng) == []


def test_a_loss_below_the_floor_of_probabilities_ends_the_finding():
    run = _ce_run()
    eng = Engine(run.layers, num_classes=K)
    feed(eng, run, range(120), _probs(run, loss=lambda s: 2.3 * math.exp(-s / 20) + 0.05))
    plateau = [e for e in eng.events if e.layer == "<loss>" and e.kind == "loss_plateau"]
    assert plateau and plateau[-1].to_state == "healthy"
    assert eng.status == "healthy"


def test_without_k_nothing_is_judged():
    run = _ce_run()
    eng = Engine(run.layers, num_classes=None)
    feed(eng, run, range(60), _probs(run))
    assert all(e.extra.get("cause") != "probabilities" for e in eng.events)


def test_a_plateau_the_loss_fell_from_does_not_explain_a_later_failure():
    # the finding from step 0, resolved by a loss that fell; then a NaN born
    # in fc1: the NaN is its own root (demo amp_scaler: NLLLoss(log(softmax)))
    run = _ce_run()
    eng = Engine(run.layers, num_classes=K)
    probs = _probs(run, loss=lambda s: 2.3 * math.exp(-s / 20) + 0.05)

    def plant(step, r):
        probs(step, r)
        if step >= 100:
            r[run.i("fc1"), M["act_nonfinite"]] = 1.0

    feed(eng, run, range(120), plant)
    assert any(e.extra.get("cause") == "probabilities" for e in eng.events)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"]) == ("nonfinite", "fc1"), rc


def test_probabilities_fed_to_a_loss_that_does_not_squash_again_are_silent():
    # NLLLoss(log(softmax(z))): the writer records no squash for NLLLoss
    run = Run()
    eng = Engine(run.layers, num_classes=K)
    feed(eng, run, range(60), _probs(run))
    assert failures(eng) == []
