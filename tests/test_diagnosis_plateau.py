"""A loss that never learned (docs/diagnosis.md, "A loss that never fell").

Two principles: a run whose loss never fell by more than
``plateau_never_drop`` of its first level sits on a plateau from the start,
even when it drifts down inside that band; and that plateau is what the user
sees, not why, so a layer failing within its first window is the root cause.
"""

from __future__ import annotations

import numpy as np

from tb_neuraldbg import metadata
from tb_neuraldbg.diagnosis import Engine, Thresholds
from tests.test_diagnosis import Run, failures, feed

M = metadata.METRIC_INDEX


def _run_curve(curve, n=200, plant=None, k=None):
    """Feed ``n`` steps whose loss is ``curve(step, rng)`` (and ``plant``),
    then finish: (plateau events, engine)."""
    run = Run()
    eng = Engine(run.layers, num_classes=k)
    li = run.i("<loss>")

    def edit(s, r):
        r[li, M["value"]] = curve(s, run.rng)
        if plant is not None:
            plant(run, s, r)
    feed(eng, run, range(n), edit)
    eng.finish()
    return [e for e in failures(eng) if e.kind == "loss_plateau"], eng


def test_a_loss_drifting_down_inside_the_band_never_learned():
    """A 200-step run from step 0 whose loss drifts from 1.10 to 1.06 (4 %):
    under ``plateau_never_drop``, so a plateau from step 0 (the old rule,
    twice as flat for a short run, called it learning)."""
    plateaus, eng = _run_curve(lambda s, rng: 1.10 - 0.0002 * s + 0.02 * rng.normal())
    assert [(e.layer, e.step) for e in plateaus] == [("<loss>", 0)]
    assert eng.root_cause["kind"] == "loss_plateau"


def test_a_slow_learner_is_no_plateau():
    """The same run falling by a fifth over 200 steps (a small rate that
    still learns) learned: no plateau, no root cause."""
    plateaus, eng = _run_curve(lambda s, rng: 1.10 - 0.0011 * s + 0.02 * rng.normal())
    assert plateaus == [] and eng.root_cause is None


def test_a_diverging_loss_is_not_a_loss_that_never_fell():
    """A loss that climbs to three times its start never fell, but it is
    diverging (the climb rule's), not flat."""
    plateaus, _ = _run_curve(lambda s, rng: 1.0 + 0.01 * s + 0.02 * rng.normal())
    assert plateaus == []


def _dead_from(step0, layer="relu0"):
    """Every unit of ``layer`` dead from ``step0`` (a backward that kills
    the gradient): zero output, no gradient below it."""
    def plant(run, s, r):
        if s >= step0:
            i = run.i(layer)
            r[i, M["act_mean"]] = 0.0
            if run.full(s):
                r[i, [M["act_std"], M["act_absmax"]]] = 0.0
                r[i, [M["act_zero_frac"], M["act_dead_frac"]]] = 1.0
            r[run.i("fc0"), M["grad_norm"]] = 0.0
    return plant


def test_a_layer_failing_in_the_plateaus_first_window_is_why_it_never_fell():
    """The loss sits at chance from step 0 and fc1's gradient explodes from
    step 3: the plateau (onset 0) is the consequence, relu0 the root cause."""
    lnk = float(np.log(4))
    plateaus, eng = _run_curve(lambda s, rng: lnk + 0.01 * rng.normal(), plant=_dead_from(3), k=4)
    assert [(e.layer, e.step) for e in plateaus] == [("<loss>", 0)]
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"]) == ("dead_activation", "relu0") and 1 <= rc["step"] <= 3


def test_a_layer_failing_after_the_first_window_does_not_explain_the_plateau():
    """The same death from step 120, long after the loss failed to fall:
    the plateau from step 0 stays the root cause."""
    lnk = float(np.log(4))
    w = Thresholds().plateau_window
    _, eng = _run_curve(lambda s, rng: lnk + 0.01 * rng.normal(), plant=_dead_from(w + 70), k=4)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("loss_plateau", "<loss>", 0)


def _first_loss(value, squash):
    """Events of 30 steps whose first loss is ``value`` (then 0.5), with the
    criterion's squashing recorded on <loss> as the writer does."""
    run = Run()
    if squash is not None:
        run.layers[run.i("<loss>")]["squash"] = squash
    eng = Engine(run.layers, num_classes=None)
    li = run.i("<loss>")
    feed(eng, run, range(30), lambda s, r: r.__setitem__((li, M["value"]), value if s == 0 else 0.5))
    return [e for e in failures(eng) if e.kind == "initial_loss"]


def test_a_negative_first_loss_of_a_squashing_criterion_is_below_its_floor():
    """BCEWithLogitsLoss (a log-sigmoid) is never negative on targets in
    [0, 1]: a first loss of -0.8 says the targets are outside (masks in
    {0, 255}), at <loss>, step 0, K unknown."""
    (ev,) = _first_loss(-0.8, "sigmoid")
    assert (ev.layer, ev.step, ev.extra.get("cause")) == ("<loss>", 0, "negative")
    assert "below 0" in ev.message and "targets" in ev.message


def test_a_negative_loss_of_a_criterion_without_that_floor_is_no_finding():
    """A negative first loss of a criterion the writer does not know the
    floor of (a Poisson or Gaussian NLL, a flow's NLL) is no finding, and a
    positive one of BCEWithLogitsLoss neither."""
    assert _first_loss(-0.8, None) == []
    assert _first_loss(0.8, "sigmoid") == []


def _with_targets_variance(tv):
    """``plant``: the targets' variance ``tv`` on the <loss> row of full steps
    (a mean-reduced MSELoss's: the loss of predicting their mean)."""
    def plant(run, s, r):
        if run.full(s):
            r[run.i("<loss>"), M["target_var"]] = tv * (1.0 + 0.05 * run.rng.normal())
    return plant


def test_a_loss_still_above_the_trivial_predictors_after_the_run_never_learned_that_constant():
    """The slow learner above (a fifth down over 200 steps) on a regression
    whose targets vary by 0.5: its loss ends near 0.88, far above what
    predicting their mean gives. It did not learn even that constant (an
    output bias learns it in a few steps): a plateau from step 0."""
    plateaus, eng = _run_curve(lambda s, rng: 1.10 - 0.0011 * s + 0.02 * rng.normal(),
                               plant=_with_targets_variance(0.5))
    assert [(e.layer, e.step, e.extra.get("reason")) for e in plateaus] == [("<loss>", 0, "above_trivial")]
    assert "has not learned even that constant" in eng.root_cause["message"]


def test_a_loss_that_fell_to_the_trivial_predictors_level_or_below_is_judged_as_before():
    """The same curve when the targets vary by 1.0 (it ends below it), and a
    loss that starts ten times above the targets' variance and falls well
    below it: learning, no plateau."""
    plateaus, _ = _run_curve(lambda s, rng: 1.10 - 0.0011 * s + 0.02 * rng.normal(),
                             plant=_with_targets_variance(1.0))
    assert plateaus == []
    plateaus, _ = _run_curve(lambda s, rng: 0.1 + 5.0 * np.exp(-s / 20) + 0.02 * rng.normal(),
                             plant=_with_targets_variance(0.5))
    assert plateaus == []


def test_a_loss_that_fell_tenfold_is_learning_whatever_its_level():
    """A loss falling from 20 to ~0.9 over the run (raw features of ~1e3
    under Adam) ends above the targets' variance of 0.5, but it fell more
    than an order of magnitude: learning, no plateau."""
    plateaus, _ = _run_curve(lambda s, rng: 0.8 + 20.0 * np.exp(-s / 25) + 0.02 * rng.normal(),
                             plant=_with_targets_variance(0.5))
    assert plateaus == []


def _gan_like(others_move: bool):
    """A flat loss at ln 2 (a generator's BCE against a discriminator that
    keeps up); fc2, the "discriminator", is outside the watched optimizer
    (opt_group -1) and, if ``others_move``, moved by another one between
    the watched optimizer's steps (its weight norm changes). Plateau events."""
    from tests.test_diagnosis_rules import _facts

    def plant(run, s, r):
        _facts(run, r, group={"fc2": -1})
        k = run.i("fc2")
        if run.full(s) and others_move:
            r[k, M["weight_norm"]] = 5.0 + 0.01 * s
        r[k, M["update_ratio"]] = 0.0 if run.full(s) else np.nan

    return _run_curve(lambda s, rng: 0.693 + 0.02 * rng.normal(), n=400, plant=plant)[0]


def test_a_loss_another_optimizer_trains_against_is_not_judged_by_its_level():
    """The generator's loss stays at ln 2 while the discriminator, trained by
    its own optimizer, keeps up: no plateau. The same flat loss with nothing
    moved outside the watched optimizer is one."""
    assert _gan_like(others_move=True) == []
    assert [e.kind for e in _gan_like(others_move=False)] == ["loss_plateau"]
