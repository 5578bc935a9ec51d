"""Dead units judged by what death costs (docs/diagnosis.md, "Dead is what
cannot learn"), on synthetic rows (test_diagnosis.py's healthy MLP run): a
ReLU layer whose units go quiet while the loss keeps falling is a sparse
code, not dead; the same fraction while the loss rises, every unit dead,
or a layer born dead are. The scenario suite checks it on real runs
(tests/scenarios/healthy.py: relu_conv_autoencoder_sparse_decoder)."""

from __future__ import annotations

from tb_neuraldbg import metadata
from tb_neuraldbg.diagnosis import Engine
from tests.test_diagnosis import Run, failures, feed

M = metadata.METRIC_INDEX


def _run(fraction, start, loss_factor=1.0, steps=300):
    """relu1's dead fraction set to ``fraction`` from ``start`` on, the loss
    multiplied by ``loss_factor`` from there; the engine's dead events."""
    run = Run()
    eng = Engine(run.layers)
    relu, loss = run.i("relu1"), run.i("<loss>")

    def plant(s, r):
        if s >= start:
            if run.full(s):
                r[relu, M["act_dead_frac"]] = fraction
                r[relu, M["act_zero_frac"]] = max(fraction, 0.5)
            r[loss, M["value"]] *= loss_factor

    feed(eng, run, range(steps), plant)
    eng.finish()
    return eng, [e for e in failures(eng) if e.kind == "dead_activation"]


def test_units_that_go_quiet_while_the_loss_falls_are_a_sparse_code():
    eng, dead = _run(0.85, 100)
    assert dead == [] and eng.status == "healthy"


def test_the_same_fraction_while_the_loss_rises_is_dead():
    """The loss rises above where it was when the layer was last alive
    (still below the first loss): the units took what they did with them.
    (From the next measurement: the loss's block of 10 must show the rise.)"""
    eng, dead = _run(0.85, 100, loss_factor=1.4)
    assert [(e.layer, e.step) for e in dead] == [("relu1", 110)]
    assert eng.root_cause["kind"] == "dead_activation"


def test_every_unit_dead_is_dead_whatever_the_loss():
    _, dead = _run(1.0, 100)
    assert [(e.layer, e.step) for e in dead] == [("relu1", 100)]


def test_a_layer_born_mostly_dead_is_dead_and_stays_so_while_the_loss_falls():
    eng, dead = _run(0.85, 0)
    assert [(e.layer, e.step, e.to_state) for e in dead] == [("relu1", 0, "dead")]
    assert eng.status == "failing"
