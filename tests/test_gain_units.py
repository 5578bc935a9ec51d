"""The gain and units aspects (diagnosis/aspects/gain.py, units.py): the
first module whose gain departs by orders of magnitude is where an
explosion or a vanishing begins, a layer whose units are all the same is
collapsed, and healthy runs (a residual's skip path, a regression head
scaled to its targets) stay silent."""

import numpy as np
import pytest
import torch
from torch import nn

from tb_neuraldbg.diagnosis import Engine
from tb_neuraldbg.diagnosis.aspects.gain import containers
from tb_neuraldbg.diagnosis.aspects.units import UNITS_IDENTICAL
from tb_neuraldbg.diagnosis.explain import value_label
from tests.test_diagnosis import M, Run, failures, feed
from tests.test_signal_gains import Amplify


class GainRun(Run):
    """:class:`Run` with the full steps' gains, output gradient norms and
    unit spreads of a healthy MLP at PyTorch's default initialisation."""

    def row(self, step):
        r = super().row(step)
        if self.full(step):
            mods = list(range(1, len(self.layers) - 2))
            rng = self.rng
            for k in mods:
                r[k, M["fwd_gain"]] = 0.6 * np.exp(rng.normal(0, 0.1))
                r[k, M["bwd_gain"]] = 0.6 * np.exp(rng.normal(0, 0.1)) if k > 1 else np.nan
                r[k, M["gout_norm"]] = 0.01 * 1.6 ** (len(mods) - k)
                r[k, M["unit_spread"]] = 0.95 + 0.04 * rng.random()
        return r


def _engine(run):
    return Engine(run.layers)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_healthy_run_with_gains_is_silent(seed):
    run = GainRun(seed=seed)
    eng = _engine(run)
    feed(eng, run, range(300))
    assert failures(eng) == []


def test_a_module_that_multiplies_its_backward_is_where_the_gradient_explodes():
    run = GainRun()
    amp = run.i("relu1")

    def plant(step, r):
        if run.full(step):
            r[amp, M["bwd_gain"]] = 1000.0
            r[:amp, M["gout_norm"]] *= 1000.0  # what it passes on reaches the layers before it

    eng = _engine(run)
    feed(eng, run, range(60), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("exploding_gradient", "relu1", 0)
    ev = next(e for e in eng.events if e.layer == "relu1")
    assert ev.value == pytest.approx(1000.0)
    assert "backward gain" in ev.message and "gradcheck" in ev.message
    assert value_label(ev.kind, ev.layer, ev.extra) == "Backward gain"


def test_a_huge_gain_whose_gradient_is_a_skip_paths_is_no_explosion():
    """A module whose input also feeds a residual's skip path, ahead of a
    zero-initialised branch: it receives almost nothing (its gain is huge),
    and passes on the skip's gradient, no larger than those after it."""
    run = GainRun()
    k = run.i("fc1")

    def plant(step, r):
        if run.full(step):
            r[k, M["gout_norm"]] = 1e-6
            r[k, M["bwd_gain"]] = r[k + 1, M["gout_norm"]] / 1e-6

    eng = _engine(run)
    feed(eng, run, range(60), plant)
    assert failures(eng) == []


def test_a_layer_initialised_20x_too_large_is_where_the_activations_explode():
    run = GainRun(hidden=3)
    k = run.i("fc1")

    def plant(step, r):
        if run.full(step):
            r[k, M["fwd_gain"]] = 12.0  # 20 x PyTorch's default 0.58
            r[k:, M["act_std"]] *= 20.0

    eng = _engine(run)
    feed(eng, run, range(40), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("activation_explosion", "fc1", 0)
    ev = next(e for e in eng.events if e.layer == "fc1")
    assert "forward gain" in ev.message and "12" in ev.message


def test_a_large_gain_that_a_normalisation_right_after_divides_away_is_no_explosion():
    """The same fc1 (gain 12) right before a LayerNorm, whose output is
    back at unit scale (a weight-standardised conv before its GroupNorm,
    a conv initialised large before BatchNorm): the signal after it never
    grew, so nothing exploded; without the norm it is fc1's explosion above."""
    run = GainRun(hidden=3)
    k = run.i("fc1")
    run.layers[k + 1]["type"] = "LayerNorm"

    def plant(step, r):
        if run.full(step):
            r[k, M["fwd_gain"]] = 12.0
            r[k, M["act_std"]] *= 20.0
            r[k + 1, M["fwd_gain"]] = 1.0 / r[k, M["act_std"]]
            r[k + 1, M["act_dead_frac"]] = np.nan

    eng = _engine(run)
    feed(eng, run, range(40), plant)
    assert failures(eng) == []


def test_gains_of_a_regression_onto_targets_far_off_unit_scale_are_the_fit():
    """Prices of ~1000 from unit features (MSE: the targets' range and
    variance recorded): the network must amplify its input ~1000-fold, ~10
    at each Linear. fc1's gain of 12 is that fit, not an explosion; the
    same gain on unit-scale targets is one (above)."""
    run = GainRun(hidden=3)
    k, li = run.i("fc1"), run.i("<loss>")

    def plant(step, r):
        if run.full(step):
            r[k, M["fwd_gain"]] = 12.0
            r[k:li, M["act_std"]] *= 20.0
            r[li, [M["target_min"], M["target_max"], M["target_var"]]] = [600.0, 1400.0, 127.0 ** 2]

    eng = _engine(run)
    feed(eng, run, range(40), plant)
    assert not [e for e in failures(eng) if e.extra.get("cause") == "module_gain"]


def test_only_the_first_departing_module_in_forward_order_is_named():
    run = GainRun(hidden=3)

    def plant(step, r):
        if run.full(step):
            for name in ("fc1", "fc2"):
                r[run.i(name), M["fwd_gain"]] = 30.0

    eng = _engine(run)
    feed(eng, run, range(40), plant)
    named = {e.layer for e in failures(eng)}
    assert named == {"fc1"}


def test_a_module_of_the_users_own_type_that_scales_its_input_to_nothing_is_a_collapse():
    run = GainRun(hidden=3)
    k = run.i("relu1")
    run.layers[k] = {"name": "relu1", "type": "Scale"}  # a custom module: x * 1e-3

    def plant(step, r):
        if run.full(step):
            r[k, M["fwd_gain"]] = 1e-3

    eng = _engine(run)
    feed(eng, run, range(40), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("activation_collapse", "relu1", 0)


def test_a_zero_initialised_linear_is_no_collapse():
    run = GainRun(hidden=3)

    def plant(step, r):
        if run.full(step):
            r[run.i("fc1"), M["fwd_gain"]] = 1e-3 * (1 + step)  # adaLN-Zero's modulation, growing

    eng = _engine(run)
    feed(eng, run, range(40), plant)
    assert failures(eng) == []


def test_the_output_layer_scaled_to_its_targets_is_not_an_explosion():
    run = GainRun()
    head = run.i("fc2")

    def plant(step, r):
        if run.full(step):
            r[head, M["fwd_gain"]] = 100.0  # a regression to targets of ~100

    eng = _engine(run)
    feed(eng, run, range(60), plant)
    assert failures(eng) == []


def test_units_all_the_same_are_a_collapse_at_the_first_such_layer():
    run = GainRun()

    def plant(step, r):
        if run.full(step) and step >= 30:
            for name in ("fc0", "relu0"):
                r[run.i(name), M["unit_spread"]] = 1e-4

    eng = _engine(run)
    feed(eng, run, range(120), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("activation_collapse", "fc0", 30)
    ev = next(e for e in eng.events if e.layer == "fc0")
    assert "units are all the same" in ev.message
    assert value_label(ev.kind, ev.layer, ev.extra) == "Unit spread"


def test_units_that_differ_a_little_are_not_collapsed():
    run = GainRun()

    def plant(step, r):
        if run.full(step):
            r[run.i("fc0"), M["unit_spread"]] = UNITS_IDENTICAL * 5  # small, but units that differ

    eng = _engine(run)
    feed(eng, run, range(60), plant)
    assert failures(eng) == []


def test_containers_are_the_rows_that_hold_others():
    assert containers(["<input>", "block", "block.0", "block.1", "blockade", "<loss>"]).tolist() == [
        False, True, False, False, False, False]


# ---------------------------------------------------------------- real runs


def _mlp(plant):
    torch.manual_seed(0)
    layers = []
    for i in range(5):
        layers += [nn.Linear(32, 32), nn.ReLU()]
        if plant == "x1000" and i == 2:
            layers.append(Amplify())
    model = nn.Sequential(*layers, nn.Linear(32, 4))
    if plant == "x20":
        with torch.no_grad():
            model[4].weight.mul_(20.0)
    return model


def _diagnose(tmp_path, plant, steps=40):
    from tb_neuraldbg import DebugWriter
    from tb_neuraldbg.reader import read_logdir

    model = _mlp(plant)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    with DebugWriter(str(tmp_path)) as w:
        w.watch(model, optimizer=opt, criterion=nn.CrossEntropyLoss())
        for _ in range(steps):
            x = torch.randn(64, 32, generator=g)
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), x[:, :4].argmax(1)).backward()
            opt.step()
    return read_logdir(str(tmp_path))[0].diagnosis


@pytest.mark.slow
@pytest.mark.parametrize("plant, kind, layer", [
    ("x20", "activation_explosion", "4"),  # the third Linear
    ("x1000", "exploding_gradient", "6"),  # the Amplify module, after the third ReLU
    (None, None, None),
])
def test_a_planted_gain_is_found_at_its_module_and_step(tmp_path, plant, kind, layer):
    diag = _diagnose(tmp_path, plant)
    rc = diag["root_cause"]
    if plant is None:
        assert rc is None and diag["status"] == "healthy"
        return
    assert (rc["kind"], rc["layer"], rc["step"]) == (kind, layer, 0)


@pytest.mark.parametrize("type_name, fam", [
    ("LlamaRMSNorm", "norm"), ("ConvNextLayerNorm", "norm"), ("MyGroupNorm2d", "norm"),
    ("LlamaRotaryEmbedding", "embedding"), ("Linear", "affine"), ("MyBlock", "other")])
def test_a_models_own_types_are_known_by_their_names(type_name, fam):
    """A model's own normalisation and embedding classes are not judged by
    their gain (a LayerNorm's is 1/std of its input whatever its health)."""
    from tb_neuraldbg.diagnosis.explain import family

    assert family(type_name) == fam


def test_a_module_off_the_gradients_path_has_no_forward_gain_judged():
    """A module whose output receives no gradient (cos/sin tables of a rotary
    embedding, made under no_grad) does not transform the signal: its
    forward gain, however large, is no explosion."""
    run = GainRun(hidden=3)
    k = run.i("fc1")

    def plant(step, r):
        if run.full(step):
            r[k, M["fwd_gain"]] = 30.0
            r[k, M["gout_norm"]] = np.nan

    eng = _engine(run)
    feed(eng, run, range(40), plant)
    assert failures(eng) == []
