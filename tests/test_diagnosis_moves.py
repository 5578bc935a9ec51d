"""Who stopped moving: one layer, or the whole model (docs/diagnosis.md,
"Who stopped moving").

A loss stuck at chance while every layer moves by a hundredth of the healthy
~1e-3 or less is the rate's (<optimizer>); the same loss with updates of a
healthy size is the objective's (<loss>); the same tiny updates with a loss
that falls are fine-tuning on purpose. One trainable layer that the optimizer
does not hold is that layer; several are the optimizer's.
"""

from __future__ import annotations

import math

import numpy as np

from tb_neuraldbg import metadata
from tb_neuraldbg.diagnosis import Engine, Thresholds
from tests.test_diagnosis import Run, failures, feed
from tests.test_diagnosis_rules import _facts, _root

M = metadata.METRIC_INDEX


def _run_at(ratio, loss_at_chance, lr=1e-6):
    """An MLP whose every layer moves by ``ratio`` of its weights per step,
    at the rate ``lr``; its loss at ln 4 (noisy) or falling as usual."""
    run = Run()
    run.lr = lr
    eng = Engine(run.layers, num_classes=4)

    def plant(s, r):
        _facts(run, r)
        if np.isfinite(r[run.params, M["update_ratio"]]).any():
            r[run.params, M["update_ratio"]] = ratio * np.exp(run.rng.normal(0, 0.2, len(run.params)))
        if loss_at_chance:
            r[run.i("<loss>"), M["value"]] = math.log(4) + 0.02 * run.rng.normal()

    feed(eng, run, range(Thresholds().plateau_min_steps + 20), plant)
    return eng


def test_a_loss_at_chance_while_the_whole_model_barely_moves_is_the_rate():
    eng = _run_at(3e-6, loss_at_chance=True)
    rc = eng.root_cause
    assert rc is not None and rc["layer"] == "<optimizer>", rc
    assert rc["kind"] in ("loss_plateau", "frozen_weights") and rc["step"] == 0
    assert "the whole model barely moves" in rc["message"] and "1.00e-06" in rc["message"]


def test_the_same_loss_with_updates_of_a_healthy_size_stays_the_objectives():
    eng = _run_at(1e-3, loss_at_chance=True, lr=1e-3)
    assert _root(eng) == ("loss_plateau", "<loss>", 0)


def test_updates_just_above_a_hundredth_of_healthy_stay_the_objectives():
    # (the threshold is the one that decides: 3x above it is not the rate)
    eng = _run_at(3e-5, loss_at_chance=True, lr=3e-6)
    assert _root(eng) == ("loss_plateau", "<loss>", 0)


def test_tiny_updates_with_a_loss_that_falls_are_silent():
    """Fine-tuning at a tiny rate on purpose: the same updates, the loss falls."""
    eng = _run_at(3e-6, loss_at_chance=False)
    assert eng.events == [] and eng.root_cause is None


def test_a_model_that_moved_at_a_healthy_size_once_is_not_blamed_on_the_rate():
    """A warmup from ~0: tiny updates first, healthy ones later; a plateau
    then is not the rate's (the model was let to move)."""
    run = Run()
    eng = Engine(run.layers, num_classes=4)

    def plant(s, r):
        lr = 1e-3 * min(1.0, (s + 1) / 100)
        _facts(run, r, lr={n: lr for n in run.names})
        r[-1, M["value"]] = lr
        if np.isfinite(r[run.params, M["update_ratio"]]).any():
            r[run.params, M["update_ratio"]] = lr * np.exp(run.rng.normal(0, 0.2, len(run.params)))
        r[run.i("<loss>"), M["value"]] = math.log(4) + 0.02 * run.rng.normal()

    feed(eng, run, range(Thresholds().plateau_min_steps + 20), plant)
    assert eng.root_cause is not None and eng.root_cause["layer"] == "<loss>", eng.root_cause


def test_one_trainable_layer_missing_from_the_optimizer_is_that_layer():
    """A head attached after the optimizer was built, the rest frozen on
    purpose (no gradient, no optimizer fact): the head is the root."""
    run = Run()
    eng = Engine(run.layers)
    head = run.i("fc2")

    def plant(s, r):
        for k in run.params:
            if k != head:  # frozen on purpose: the writer sees no parameters there
                r[k, [M["grad_norm"], M["grad_missing"], M["weight_norm"], M["update_ratio"],
                      M["grad_nonfinite"]]] = np.nan
        r[head, M["opt_group"]] = -1
        if np.isfinite(r[head, M["update_ratio"]]):
            r[head, M["update_ratio"]] = 0.0

    feed(eng, run, range(30), plant)
    assert _root(eng) == ("frozen_weights", "fc2", 0)
    (ev,) = failures(eng)
    assert ev.extra["cause"] == "not_in_optimizer"


def test_several_layers_missing_from_the_optimizer_are_the_optimizers():
    run = Run()
    eng = Engine(run.layers)
    feed(eng, run, range(12), lambda s, r: _facts(run, r, group={n: -1 for n in run.names}))
    assert _root(eng) == ("frozen_weights", "<optimizer>", 0)


def _scheduled(rate, steps, ur_when_still=0.0):
    """An MLP at the rate ``rate(step)`` of every group, whose updates scale
    with it (``ur_when_still`` where the rate is 0: 0 measured, or NaN when
    the writer skips it); its loss falls while the rate is up, then holds."""
    run = Run()
    eng = Engine(run.layers, num_classes=4)
    level = [math.log(4)]

    def plant(s, r):
        lr = rate(s)
        _facts(run, r, lr={n: lr for n in run.names})
        if np.isfinite(r[run.params, M["update_ratio"]]).any():
            ur = lr * np.exp(run.rng.normal(0, 0.2, len(run.params)))
            r[run.params, M["update_ratio"]] = ur if lr > 0 else ur_when_still
        level[0] *= 0.99 if lr > 0 else 1.0
        r[run.i("<loss>"), M["value"]] = level[0] + 0.01 * run.rng.normal()

    feed(eng, run, range(steps), plant)
    return eng


def test_a_schedule_that_took_the_rate_to_zero_mid_run_stopped_the_optimizer():
    """A linear schedule given one epoch as its total: the rate is 0 from
    step 40 while training goes on (the weights never move again)."""
    for still in (0.0, np.nan):  # measured as 0, or not measured at all
        eng = _scheduled(lambda s: 1e-3 * max(0.0, 1 - s / 40), 200, still)
        rc = eng.root_cause
        assert rc is not None and (rc["kind"], rc["layer"]) == ("frozen_weights", "<optimizer>"), rc
        assert 30 <= rc["step"] <= 45, rc
        assert "is 0 at step" in rc["message"], rc["message"]


def test_a_schedule_that_ends_at_zero_with_the_run_or_starts_there_is_silent():
    """A linear decay reaching 0 at the last steps, and a warmup from 0."""
    n = 160
    for rate in (lambda s: 1e-3 * max(0.0, 1 - s / (n - 5)), lambda s: 1e-3 * min(1.0, s / 10)):
        eng = _scheduled(rate, n)
        assert eng.root_cause is None, eng.root_cause
