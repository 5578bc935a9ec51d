"""A fault visible before any update is not the optimizer's (docs/diagnosis.md,
"Before any update"), on synthetic rows (test_diagnosis.py's healthy MLP run
with one thing planted): gradients extreme against the weights they were
taken on, and unnormalised inputs under a loss that climbs from the first
update. The scenario suite checks the same on real training runs
(tests/scenarios/failures.py: set_sum_pooling, sensor_counts_not_scaled)."""

from __future__ import annotations

import pytest

from tb_neuraldbg import metadata
from tb_neuraldbg.diagnosis import Engine
from tests.test_diagnosis import Run, feed

M = metadata.METRIC_INDEX


def _root(eng):
    rc = eng.root_cause
    return rc and (rc["kind"], rc["layer"], rc["step"])


@pytest.mark.parametrize("extreme", [True, False])
def test_step_zero_gradients_are_judged_against_the_weights_before_the_update(extreme):
    """The weight norm is read after the step's update: an update 40x the
    weights leaves a norm of ~40x the weights the gradient was taken on. A
    gradient 200x those weights is extreme before any update (the layers, not
    the rate); the same large update from ordinary gradients is the rate."""
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        if s == 0:
            # ||w_before|| = 5: the update moved the weights 40x their norm
            r[run.params, M["update_ratio"]] = 40.0
            r[run.params, M["weight_norm"]] = 5.0 * 40.0
            r[run.params, M["grad_norm"]] = 1e3 if extreme else 1.0
        elif s < 8 and run.full(s):
            r[run.params, M["update_ratio"]] = 5.0
        if s >= 8:
            r[run.params, M["grad_norm"]] *= 1e5 * s

    feed(eng, run, range(20), plant)
    root = _root(eng)
    if extreme:
        assert root[1] != "<optimizer>" and root[0] == "exploding_gradient", eng.root_cause
    else:
        assert root[:2] == ("exploding_gradient", "<optimizer>"), eng.root_cause
        assert "Updates larger than" in eng.root_cause["message"]


@pytest.mark.parametrize("raw", [True, False])
def test_a_loss_that_climbs_from_the_first_update_on_unscaled_inputs_is_the_inputs(raw):
    """The loss doubles from the first update and the layers explode: the
    optimizer's (updates that climb the loss) on normalised inputs; on inputs
    of RMS ~1e3 whose first updates were already far larger than the
    weights, the inputs (they are upstream of those updates)."""
    run = Run()
    eng = Engine(run.layers)
    loss = run.i("<loss>")

    def plant(s, r):
        if raw:
            r[0, [M["act_std"], M["act_absmax"]]] = [1000.0, 3500.0]
        if s < 8 and run.full(s):
            r[run.params, M["update_ratio"]] = 5.0
        if s >= 1:
            r[loss, M["value"]] *= 2.0 ** s
        if s >= 8:
            r[run.params, M["grad_norm"]] *= 1e5 * s

    feed(eng, run, range(20), plant)
    rc = eng.root_cause
    if raw:
        assert rc["layer"] == "<input>" and "RMS 1e+03" in rc["message"], rc
    else:
        assert rc["layer"] == "<optimizer>", rc
