"""The diagnosis rules for bugs that leave the statistics healthy, failure
chains, causes per param group and relative bursts, on synthetic rows (the
healthy MLP run of test_diagnosis.py with one thing planted). The scenario
suite checks the same rules on real training runs."""

from __future__ import annotations

import numpy as np

from tb_neuraldbg import metadata
from tb_neuraldbg.diagnosis import Engine
from tests.test_diagnosis import Run, dying, failures, feed

M = metadata.METRIC_INDEX


def _facts(run, r, group=None, lr=None, wd=0.0, momentum=0.9):
    """The writer's per-row optimizer facts: every parameter row in group 0
    at the run's rate, unless ``group``/``lr`` map row names to others."""
    group, lr = group or {}, lr or {}
    for k in run.params:
        name = run.names[k]
        r[k, M["opt_group"]] = group.get(name, 0)
        r[k, M["lr"]] = lr.get(name, run.lr)
        r[k, M["weight_decay"]] = wd
        r[k, M["momentum"]] = momentum


def _root(eng):
    rc = eng.root_cause
    return rc and (rc["kind"], rc["layer"], rc["step"])


# --------------------------------------------- healthy-looking statistics


def test_gradients_left_over_from_the_previous_step_are_an_accumulation():
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        _facts(run, r)
        if s >= 1:  # zero_grad() forgotten: every layer starts backward with the last step's gradients
            r[run.params, M["grad_carried"]] = 0.1 * s

    feed(eng, run, range(40), plant)
    assert _root(eng) == ("exploding_gradient", "<optimizer>", 1)
    (ev,) = [e for e in failures(eng) if e.layer == "<optimizer>"]
    assert ev.extra["cause"] == "grad_accumulation" and ev.value == 1.0 and "zero_grad" in ev.message


def test_legit_accumulation_and_cleared_gradients_are_silent():
    run = Run()
    eng = Engine(run.layers)
    feed(eng, run, range(300), lambda s, r: _facts(run, r))
    assert eng.events == []


def test_a_step_that_moves_no_layer_at_all_is_the_optimizers():
    """zero_grad() between backward() and step(): gradients at backward's
    end, an update ratio of exactly 0 everywhere."""
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        _facts(run, r)
        r[run.params, M["update_ratio"]] = np.where(np.isfinite(r[run.params, M["update_ratio"]]), 0.0, np.nan)

    feed(eng, run, range(30), plant)
    assert _root(eng) == ("frozen_weights", "<optimizer>", 0)
    # (the root cause's message leads with the advice; what was seen follows)
    assert "Seen: <optimizer>: no layer of the model moves" in eng.root_cause["message"]


def test_an_optimizer_that_holds_no_layer_of_the_model_is_the_optimizers():
    run = Run()
    eng = Engine(run.layers)
    feed(eng, run, range(12), lambda s, r: _facts(run, r, group={n: -1 for n in run.names}))
    assert _root(eng) == ("frozen_weights", "<optimizer>", 0)
    assert "holds none of the model's parameters" in eng.root_cause["message"]


def test_a_group_at_lr_zero_freezes_its_layers_and_a_warmup_from_zero_does_not():
    run = Run()
    eng = Engine(run.layers)
    # fc0 in group 1 at lr 0 (fc1, fc2 in group 0 at the run's rate)
    def plant(s, r):
        _facts(run, r, group={"fc0": 1}, lr={"fc0": 0.0})
        r[run.i("fc0"), M["update_ratio"]] *= 0.0  # (measured at update steps: it did not move)

    feed(eng, run, range(60), plant)
    assert _root(eng) == ("frozen_weights", "fc0", 0)
    (ev,) = failures(eng)
    assert ev.extra["cause"] == "lr_zero" and ev.extra["group"] == 1 and "learning rate of param group 1 is 0" in ev.message
    assert ev.value == 0.0  # it moved by exactly 0: known at every step, not "n/a"

    eng = Engine(run.layers)
    feed(eng, run, range(60), lambda s, r: _facts(run, r, lr={n: (0.0 if s == 0 else run.lr) for n in run.names}))
    assert eng.events == []


def test_a_module_run_without_autograd_has_no_gradient():
    """torch.no_grad() inside forward: no activation statistics (the hooks
    skip it), no gradient, but the writer saw it run."""
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        i = run.i("fc0")
        r[i, [M["act_mean"], M["act_std"], M["act_absmax"], M["act_nonfinite"], M["grad_norm"]]] = np.nan
        r[i, M["grad_missing"]] = 2
        r[i, M["ran_without_grad"]] = 1

    feed(eng, run, range(20), plant)
    assert _root(eng) == ("no_gradient", "fc0", 0)
    (ev,) = failures(eng)
    assert ev.extra["ran_without_grad"] and "torch.no_grad()" in ev.message


def test_a_constant_output_fed_by_a_layer_blind_to_the_sample_from_the_start_is_that_layers():
    """fc0's output is the same for every sample from step 0 while the batch
    differs (a tanh RNN saturated at +-1 by raw inputs), and passes no
    gradient to its weights; relu0 after it is constant. Fed one input, a
    layer gives one output: the root is fc0, not relu0's collapse."""
    from tests.test_diagnosis_samples import SampleRun

    run = SampleRun()
    eng = Engine(run.layers)
    i = run.i("fc0")

    def plant(s, r):
        r[i, M["grad_norm"]] = np.nan
        r[i, M["grad_missing"]] = 2
        if run.full(s):
            r[i, M["sample_spread"]] = 0.0
            r[i + 1, [M["act_std"], M["act_dead_frac"], M["act_zero_frac"]]] = [0.0, 0.0, 0.0]
            r[i + 1, M["sample_spread"]] = np.nan

    feed(eng, run, range(60), plant)
    assert _root(eng)[1:] == ("fc0", 0), _root(eng)


# ------------------------------------------------------- causes per group


def test_a_weight_decay_raised_in_one_group_before_a_failure_is_the_optimizers():
    run = Run()
    eng = Engine(run.layers)
    at = 200

    def plant(s, r):
        wd = 1e-4 if s < at else 5.0  # group 1's weight decay typed wrong at step 200
        _facts(run, r, group={"fc1": 1})
        r[run.i("fc1"), M["weight_decay"]] = wd
        if s >= at + 20 and run.full(s):  # its output stops varying
            r[run.i("fc1"), M["act_std"]] = 0.0

    feed(eng, run, range(300), plant)
    rc = eng.root_cause
    assert (rc["layer"], rc["step"]) == ("<optimizer>", at)
    (ev,) = [e for e in eng.events if e.layer == "<optimizer>"]
    assert (ev.extra["group"], ev.extra["hyperparameter"], ev.extra["after"]) == (1, "weight_decay", 5.0)
    assert "weight decay of param group 1" in ev.message


def test_a_rate_raised_under_a_fixed_weight_decay_is_the_rates_change():
    """AdamW's decay per step is lr x weight_decay: it rises with the rate,
    but the user changed the rate, and the message says so (the zoo's lr x1000
    under weight_decay=0.01, tests/test_model_zoo.py)."""
    run = Run()
    eng = Engine(run.layers)
    at = 100

    def plant(s, r):
        _facts(run, r, lr={n: (1e-3 if s < at else 1.0) for n in run.names}, wd=0.01)
        if s >= at + 5:
            r[run.params, M["grad_norm"]] *= 10.0 ** min(6, s - at - 4)

    feed(eng, run, range(130), plant)
    rc = eng.root_cause
    assert (rc["layer"], rc["step"]) == ("<optimizer>", at)
    assert "learning rate" in rc["message"] and "weight decay" not in rc["message"], rc["message"]


def test_a_momentum_cycled_at_every_step_is_not_a_change_to_blame():
    """OneCycleLR cycles the momentum every step: a later bad batch is the
    batch's, not the optimizer's."""
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        _facts(run, r, momentum=0.85 + 0.1 * abs(((s / 50) % 2) - 1))
        if s == 300:
            r[0, M["act_absmax"]] *= 1e3
            r[0, M["act_std"]] *= 1e3

    feed(eng, run, range(320), plant)
    assert _root(eng) == ("data_anomaly", "<input>", 300)


# -------------------------------------------------------- bursts, climbs


def test_a_burst_the_loss_pays_for_is_the_root_and_a_harmless_one_is_info():
    run = Run()
    eng = Engine(run.layers)
    loss = run.i("<loss>")

    def plant(s, r):
        if s == 150:
            r[run.i("fc1"), M["grad_norm"]] *= 300  # one step, then back
        if s > 150:  # the update wrecked the weights: the loss climbs and stays up
            r[loss, M["value"]] *= min(4.0, 1 + 0.3 * (s - 150))

    feed(eng, run, range(230), plant)
    assert _root(eng) == ("exploding_gradient", "fc1", 150)
    assert "burst" in eng.root_cause["message"]

    eng = Engine(run.layers)
    feed(eng, run, range(230), lambda s, r: s == 150 and r.__setitem__(
        (run.i("fc1"), M["grad_norm"]), r[run.i("fc1"), M["grad_norm"]] * 300))
    (note,) = eng.events
    assert note.severity == "info" and note.layer == "fc1" and "clip" in note.message


def test_a_loss_that_climbs_step_after_step_is_a_divergence():
    """3 % more each step from step 200: never a spike against a window that
    climbs with it, a divergence all the same."""
    run = Run()
    eng = Engine(run.layers)
    loss = run.i("<loss>")

    def plant(s, r):
        if s >= 200:
            r[loss, M["value"]] *= 1.03 ** (s - 200)

    feed(eng, run, range(320), plant)
    (ev,) = failures(eng)
    assert (ev.kind, ev.layer, ev.extra["reason"]) == ("loss_spike", "<loss>", "climb")
    assert 200 <= ev.step <= 240 and "climbs" in ev.message


def test_a_loss_without_a_floor_at_0_that_dips_below_it_and_back_is_no_climb():
    """A density's negative log-likelihood (a mixture density network) falls
    from 1.2 to a block around 0.1 whose losses dip below 0, then goes back
    to ~0.9: "twice the best level" means nothing for a loss with no floor
    at 0, as the spike's ratio does not."""
    run = Run()
    eng = Engine(run.layers)
    loss = run.i("<loss>")

    def plant(s, r):
        if 100 <= s < 110:
            r[loss, M["value"]] = 0.1 + 0.2 * (-1) ** s
        else:
            r[loss, M["value"]] = (1.2 - 0.008 * s if s < 100 else 0.9) + 0.05 * run.rng.normal()

    feed(eng, run, range(200), plant)
    assert not [e for e in failures(eng) if e.extra.get("reason") == "climb"]


# ------------------------------------------------------------------ chains


def test_a_chain_of_constant_layers_starts_at_its_first_link():
    """fc1's output stops varying (its weights collapsed): everything after
    it is constant too, the gradients before it vanish; the root is fc1."""
    run = Run(hidden=3)
    eng = Engine(run.layers)
    chain = [run.i(n) for n in ("fc1", "relu1", "fc2", "relu2")]

    def plant(s, r):
        if s >= 100:
            if run.full(s):
                r[chain, M["act_std"]] = 0.0
            r[run.i("fc0"), M["grad_norm"]] *= 1e-6

    feed(eng, run, range(160), plant)
    assert _root(eng) == ("activation_collapse", "fc1", 100)


def test_a_constant_output_that_was_all_zeros_before_is_constant_since_then():
    """A LayerNorm over one feature outputs its bias for every input: 0 at
    step 0 (all zeros: dead), then the one value its bias moved to
    (collapsed). It carried nothing since step 0, where fc2 after it turned
    constant too: the root is fc1 at step 0, not its consequence."""
    run = Run(hidden=2)
    eng = Engine(run.layers)
    i, after = run.i("fc1"), [run.i(n) for n in ("relu1", "fc2")]

    def plant(s, r):
        if run.full(s):
            r[i, M["act_mean"]] = r[i, M["act_absmax"]] = 0.0 if s == 0 else 0.003 * (s + 1)
            r[i, [M["act_std"], M["act_zero_frac"]]] = [0.0, 1.0 if s == 0 else 0.0]
            r[after, M["act_std"]] = 0.0

    feed(eng, run, range(60), plant)
    assert _root(eng) == ("activation_collapse", "fc1", 0)


def test_gradients_exactly_zero_below_a_layer_name_that_layer():
    """A pruning mask of 100 % on fc1: fc0's gradient is exactly 0 while
    fc1's own (its bias) is not, and nothing before it is dead."""
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        if s >= 100:
            r[run.i("fc0"), M["grad_norm"]] = 0.0

    feed(eng, run, range(140), plant)
    assert _root(eng) == ("vanishing_gradient", "fc1", 100)
    assert "passes no gradient to its input" in eng.root_cause["message"]
    # (or a module that is not a row zeroes what reaches it: TensorFlow's
    # keep_prob=1.0 passed as nn.Dropout(p=1.0), discuss.pytorch.org)
    assert "Dropout with p=1" in eng.root_cause["message"]


# --------------------------------------------- an overflowed gradient norm


def test_an_overflowed_norm_over_finite_gradients_is_an_explosion_not_a_nonfinite_value():
    """The float32 sum of squares of huge, finite gradients overflows: the
    norm is inf while the exact count (a replayed step) is 0. That is an
    exploding gradient; the same inf norm with a count above 0, or with no
    exact count (the flag), stays a non-finite gradient."""
    for count, kind in ((0.0, "exploding_gradient"), (3.0, "nonfinite"), (np.nan, "nonfinite")):
        run = Run()
        eng = Engine(run.layers)

        def plant(s, r):
            if s >= 100:
                r[run.params, M["grad_norm"]] = np.inf
                r[run.params, M["grad_nonfinite"]] = count

        feed(eng, run, range(110), plant)
        first = [e for e in failures(eng) if e.layer in {run.names[k] for k in run.params}]
        assert first and {e.kind for e in first if e.step == 100} == {kind}, (count, first)


def test_a_chain_born_dead_from_zero_weights_starts_at_the_first_layer():
    """Every Linear initialised to zero (a thread's "why don't my weights
    change"): each layer's output is exactly 0 from step 0 and the hidden
    layers get exactly zero gradients. The first link, whose input (the
    batch) is alive, is fc0, not the deepest dead ReLU."""
    run = Run()
    eng = Engine(run.layers)
    chain = [run.i(n) for n in ("fc0", "relu0", "fc1", "relu1")]

    def plant(s, r):
        r[chain, M["act_mean"]] = 0.0
        if run.full(s):
            r[chain, M["act_std"]] = 0.0
            r[chain, M["act_absmax"]] = 0.0
            r[chain, M["act_zero_frac"]] = 1.0
            r[[run.i("relu0"), run.i("relu1")], M["act_dead_frac"]] = 1.0
        r[[run.i("fc0"), run.i("fc1")], M["grad_norm"]] = 0.0

    feed(eng, run, range(60), plant)
    assert _root(eng) == ("dead_activation", "fc0", 0)


def test_an_output_activation_exactly_zero_for_every_sample_is_dead():
    """A ReLU after the last Linear of a regression whose targets are
    negative: once it outputs 0 for every sample it passes no gradient back.
    Confident outputs of an output activation are success; an output that is
    exactly 0 everywhere is not (and one that only partly is stays silent)."""
    run = Run()
    layers = run.layers[:-2] + [{"name": "out", "type": "ReLU"}] + run.layers[-2:]
    at = len(layers) - 3

    def rows(dead_from, frac):
        eng = Engine(layers)
        for s in range(120):
            r = run.row(s)
            out = np.full((1, r.shape[1]), np.nan, np.float32)
            out[0, M["act_nonfinite"]] = 0
            gone = s >= dead_from
            out[0, M["act_mean"]] = 0.0 if gone and frac == 1.0 else 0.3
            if run.full(s):
                out[0, [M["act_std"], M["act_absmax"]]] = (0.0, 0.0) if gone and frac == 1.0 else (0.8, 3.0)
                out[0, M["act_zero_frac"]] = frac if gone else 0.5
                out[0, M["act_dead_frac"]] = frac if gone else 0.05
            eng.update(s, np.insert(r, at, out, axis=0))
        return eng

    eng = rows(40, 1.0)
    assert _root(eng) == ("dead_activation", "out", 40)
    assert rows(40, 0.97).root_cause is None  # most outputs at 0: a confident output, not a dead one


def test_a_layer_stepped_by_a_second_optimizer_is_not_frozen():
    """SparseAdam for an embedding beside Adam for the rest (PyTorch's recipe
    for sparse gradients), Adam watched: fc0 is in none of its groups and
    the watched step does not move it (update ratio 0), but its weight norm
    changes between measurements: it is moved, by the other optimizer."""
    for moved in (True, False):
        run = Run()
        eng = Engine(run.layers)

        def plant(s, r):
            _facts(run, r, group={"fc0": -1})
            r[run.i("fc0"), M["update_ratio"]] *= 0.0
            if moved and run.full(s):
                r[run.i("fc0"), M["weight_norm"]] = 5.0 + 0.01 * s

        feed(eng, run, range(60), plant)
        if moved:
            assert eng.events == []
        else:
            assert _root(eng) == ("frozen_weights", "fc0", 0)


def test_gradients_held_back_at_the_start_by_a_zero_initialised_layer_are_not_vanishing():
    """DiT's adaLN-Zero with its output layer zero-initialised too: the layers
    before get exactly 0, then tiny gradients for their first ~20 steps, and
    then train. Vanishing from the first step is confirmed over
    persist_vanishing_born steps; one that lasts keeps its onset at step 0."""
    for until in (22, None):
        run = Run()
        eng = Engine(run.layers)

        def plant(s, r):
            if until is None or s < until:
                r[run.i("fc0"), M["grad_norm"]] *= 0.0 if s < 2 else 1e-5 * (s + 1)

        feed(eng, run, range(120), plant)
        if until is not None:
            assert eng.events == []
        else:
            assert _root(eng) == ("vanishing_gradient", "fc1", 0)


def test_an_output_offset_by_its_bias_is_not_an_amplification():
    """A regression's output bias set to the targets' mean at initialisation
    (Karpathy's "init well": a mean of 1.5e5): a large output, but a constant
    offset, not a gain; the same scale as spread is an explosion."""
    for spread in (False, True):
        run = Run()
        eng = Engine(run.layers)

        def plant(s, r):
            if run.full(s):
                i = run.i("fc2")
                r[i, M["act_mean"]] = 1.5e5
                r[i, M["act_std"]] = 2e4 if spread else 1.0
                r[i, M["act_absmax"]] = 1.5e5 + (6e4 if spread else 3.0)

        feed(eng, run, range(40), plant)
        kinds = {(e.layer, e.kind) for e in failures(eng)}
        assert (("fc2", "activation_explosion") in kinds) == spread, kinds


# ----------------------------------------- principles before rules (DESIGN.md)


def test_a_gradient_exactly_zero_at_every_step_passes_no_gradient():
    """A parameter the optimizer holds whose gradient is exactly 0 at every
    step (a gate of zeros) is no_gradient from its first step, like a None
    gradient; one that is 0 at the first steps only (a zero-initialised
    layer after it) and one the optimizer does not hold are not."""
    for case in ("always", "first_steps", "not_held"):
        run = Run()
        eng = Engine(run.layers)

        def plant(s, r):
            _facts(run, r, group={"fc0": -1} if case == "not_held" else None)
            if case != "first_steps" or s < 3:
                r[run.i("fc0"), M["grad_norm"]] = 0.0

        feed(eng, run, range(60), plant)
        got = [e for e in failures(eng) if e.kind == "no_gradient"]
        if case == "always":
            assert _root(eng) == ("no_gradient", "fc0", 0)
            assert got[0].extra["cause"] == "zero_gradient" and "exactly 0 at every step" in got[0].message
        else:
            assert got == []


def test_a_dead_layer_still_wins_over_the_zero_gradients_it_causes():
    """Every unit of relu1 dead from the start: fc1 and the layers before it
    get exactly 0 gradients; the dead layer is the root (the chain's first link)."""
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        _facts(run, r)
        if run.full(s):
            r[run.i("relu1"), [M["act_dead_frac"], M["act_zero_frac"]]] = 1.0
            r[run.i("relu1"), [M["act_mean"], M["act_std"], M["act_absmax"]]] = 0.0
        r[[run.i("fc0"), run.i("fc1")], M["grad_norm"]] = 0.0

    feed(eng, run, range(60), plant)
    assert _root(eng) == ("dead_activation", "relu1", 0)
    # (and their zero gradients are its consequence, not a finding of their own)
    assert [e for e in failures(eng) if e.kind == "no_gradient"] == []


def test_warnings_that_were_resolved_leave_the_run_healthy_with_warnings():
    """DESIGN.md, Severity and status: a loss that starts far above ln K and
    then trains is a warning, and the run is healthy (the root cause still
    names it); the same start with a loss that never falls is failing, and
    so is a warning that still stands (a dead layer) or any error."""
    for trains in (True, False):
        run = Run()
        eng = Engine(run.layers, num_classes=4)

        def plant(s, r):
            i = run.i("<loss>")
            r[i, M["value"]] = (8.0 if s == 0 else r[i, M["value"]]) if trains else 8.0 + 0.01 * (s % 3)

        feed(eng, run, range(60), plant)
        assert _root(eng) == ("initial_loss", "<loss>", 0)
        assert eng.status == ("healthy" if trains else "failing")
    run = Run()
    eng = Engine(run.layers)

    def dead(s, r):
        if s >= 20:
            dying(run, r)
        if run.full(s) and s >= 20:
            r[run.i("relu1"), M["act_dead_frac"]] = 0.97

    feed(eng, run, range(100), dead)
    assert _root(eng)[:2] == ("dead_activation", "relu1") and eng.status == "failing"
    feed(eng, run, range(100, 200))  # it recovers: a warning of the past
    assert _root(eng)[:2] == ("dead_activation", "relu1") and eng.status == "healthy"


def test_severity_does_not_decide_causality():
    """relu1 dies (a warning, measured every 10th step) and the layer it
    feeds, fc2, sees its gradient explode from a step in between (an error):
    the dead layer is the root, the explosion its consequence. The same
    explosion with relu1 alive is the root itself."""
    for dies in (True, False):
        run = Run()
        eng = Engine(run.layers)

        def plant(s, r):
            if dies and run.full(s) and s >= 60:
                r[run.i("relu1"), [M["act_dead_frac"], M["act_zero_frac"]]] = 1.0
                r[run.i("relu1"), [M["act_mean"], M["act_std"], M["act_absmax"]]] = 0.0
            if s >= 55:
                r[run.i("fc2"), M["grad_norm"]] *= 1e4

        feed(eng, run, range(100), plant)
        assert _root(eng) == (("dead_activation", "relu1", 60) if dies else ("exploding_gradient", "fc2", 55))


def test_large_first_updates_on_gradients_already_extreme_are_not_the_rate():
    """Updates larger than the weights from the first step, then the layers
    explode: the rate when the gradients were ordinary before the first
    update; the inputs when they were unnormalised, with the first layers'
    gradients already 1e3x their weights or not (a rate fine on normalised
    data: the inputs are upstream of the gradients that made the updates)."""
    for raw_inputs in (False, True, "gradients ordinary"):
        run = Run()
        eng = Engine(run.layers)

        def plant(s, r):
            if raw_inputs:
                r[0, [M["act_std"], M["act_absmax"]]] = [1000.0, 3500.0]
                if s == 0 and raw_inputs is True:
                    r[run.i("fc0"), M["grad_norm"]] = 5e3
            if s < 8 and run.full(s):
                r[run.params, M["update_ratio"]] = 5.0
            if s >= 8:
                r[run.params, M["grad_norm"]] *= 1e5 * s

        feed(eng, run, range(20), plant)
        rc = eng.root_cause
        assert rc["layer"] == ("<input>" if raw_inputs else "<optimizer>"), rc
        if raw_inputs is True:
            assert "before any update" in rc["message"] and "RMS 1e+03" in rc["message"]
        elif raw_inputs:  # the inputs are upstream of whatever the first updates did
            assert "from the first ones on" in rc["message"] and "RMS 1e+03" in rc["message"]


def test_updates_that_collapse_while_gradients_flow_are_the_optimizers():
    """A per-epoch schedule stepped per batch: the rate, hence the updates,
    fall a millionfold while the gradients flow; lr=1e-9 from the start: the
    updates are negligible. Both are <optimizer>, with the rate's history.
    A step schedule's two tenfold drops (gradients shrinking as it
    converges), and a cosine annealed to 0 at the end of the run, are healthy."""
    import math

    for case in ("decay", "tiny", "steps", "cosine"):
        run = Run()
        eng = Engine(run.layers)

        def plant(s, r):
            lr = {"decay": 0.01 * 0.9 ** s, "tiny": 1e-9, "steps": 0.01 * 0.1 ** (s // 100),
                  "cosine": 0.005 * (1 + math.cos(math.pi * min(s, 299) / 299))}[case]
            _facts(run, r, lr={n: lr for n in run.names})
            r[-1, M["value"]] = lr
            r[run.params, M["update_ratio"]] *= lr / 0.01

        feed(eng, run, range(300), plant)
        if case in ("steps", "cosine"):
            assert eng.events == []
            continue
        rc = eng.root_cause
        assert (rc["kind"], rc["layer"]) == ("frozen_weights", "<optimizer>"), rc
        assert "stopped moving the model" in rc["message"]
        if case == "decay":
            assert "collapsed from" in rc["message"] and "The learning rate was 0.01 at step 0" in rc["message"]
        else:
            assert "The learning rate was 1.00e-09" in rc["message"]


def test_a_regression_stuck_at_its_targets_variance_is_a_plateau():
    """MSE whose loss fell, then stays at the targets' variance (the loss of
    predicting their mean): loss_plateau at <loss>, the message names the
    level. The same fall to a level well below the variance is a converged run."""
    for stuck in (True, False):
        run = Run()
        eng = Engine(run.layers)

        def plant(s, r):
            i = run.i("<loss>")
            floor = 4.0 if stuck else 0.5
            r[i, M["value"]] = floor + 30.0 * np.exp(-s / 20) + 0.2 * run.rng.random()
            if run.full(s):
                r[i, M["target_var"]] = 4.0 + 0.3 * run.rng.standard_normal()

        feed(eng, run, range(500), plant)
        eng.finish()
        if not stuck:
            assert eng.events == []
            continue
        rc = eng.root_cause
        assert (rc["kind"], rc["layer"]) == ("loss_plateau", "<loss>"), rc
        (ev,) = [e for e in failures(eng) if e.kind == "loss_plateau"]
        assert ev.extra["reason"] == "trivial" and "predicting the targets' mean" in ev.message
        assert "variance, that trivial predictor's loss, is 4" in ev.message


def test_integer_inputs_are_not_judged_as_unnormalised_features():
    """A bad initial loss on a batch of RMS ~100: blamed on <input> when the
    batch is floats (unnormalised features; the message says when they are
    all integers), on <loss> when it is token ids (an integer dtype)."""
    for integers in (0.0, 0.5, 1.0):
        run = Run()
        eng = Engine(run.layers, num_classes=4)

        def plant(s, r):
            r[0, [M["act_mean"], M["act_std"], M["act_absmax"]]] = [100.0, 58.0, 199.0]
            if run.full(s):
                r[0, M["input_integers"]] = integers
            if s == 0:
                r[run.i("<loss>"), M["value"]] = 20.0

        feed(eng, run, range(30), plant)
        rc = eng.root_cause
        assert rc["layer"] == ("<loss>" if integers == 1.0 else "<input>"), rc
        assert ("holds only integers" in rc["message"]) == (integers == 0.5)


def test_the_writer_records_integer_inputs_and_the_targets_variance(tmp_path):
    """The columns the two rules read, from a real DebugWriter: the batch's
    integers (1 by dtype, 0.5 as floats, 0 otherwise) and MSELoss's target
    variance (NaN for other criteria)."""
    import torch
    from torch import nn

    from scenarios.harness import Spec, train

    def build(crit):
        def f():
            model = nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(8, 1))
            return model, torch.optim.SGD(model.parameters(), lr=0.01), crit, None
        return f

    def ids(step):
        g = torch.Generator().manual_seed(step)
        return torch.randint(0, 10, (16, 2), generator=g), 3.0 * torch.randn(16, 1, generator=g)

    got = train(Spec("ids", build(nn.MSELoss()), ids, steps=3), str(tmp_path / "a"))
    _, ints = got.series("<input>", "input_integers")
    _, tv = got.series("<loss>", "target_var")
    assert (ints == 1.0).all() and np.allclose(tv, [ids(s)[1].var(dim=0).mean().item() for s in range(3)], rtol=1e-5)
    got = train(Spec("l1", build(nn.L1Loss()), ids, steps=2),
                str(tmp_path / "b"))
    assert np.isnan(got.series("<loss>", "target_var")[1]).all()

    def mlp():
        model = nn.Sequential(nn.Linear(2, 1))
        return model, torch.optim.SGD(model.parameters(), lr=0.01), nn.MSELoss(), None

    for cast, want in ((lambda x: x.float(), 0.5), (lambda x: x.float() + 0.5, 0.0)):
        got = train(Spec("f", mlp, lambda s: (cast(ids(s)[0]), ids(s)[1]), steps=2), str(tmp_path / f"c{want}"))
        assert (got.series("<input>", "input_integers")[1] == want).all()


def test_a_layer_whose_updates_are_negligible_is_frozen():
    """One param group at lr=1e-9 beside the others: its layer moves by ~1e-9
    of its weights; frozen_weights there, with its group's rate."""
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        _facts(run, r, group={"fc2": 1}, lr={"fc2": 1e-9})
        if run.full(s):
            r[run.i("fc2"), M["update_ratio"]] = 1e-9

    feed(eng, run, range(60), plant)
    assert _root(eng) == ("frozen_weights", "fc2", 0)
    (ev,) = failures(eng)
    assert ev.extra["cause"] == "update_negligible" and "learning rate 1.00e-09, param group 1" in ev.message
