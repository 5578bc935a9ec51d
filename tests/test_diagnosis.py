"""Unit tests of the diagnosis engine on synthetic statistics rows.

Each rule is exercised against a healthy baseline (noisy, measured like the
writer measures: gradients and the non-finite flags every step, activation and
weight statistics every 10th step) with one thing planted. The scenario suite
(tests/test_scenarios.py) checks the same rules on real training runs.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tb_neuraldbg import metadata
from tb_neuraldbg.diagnosis import Engine, Event, Thresholds

M = metadata.METRIC_INDEX
S = metadata.STATE_CODE
NM = len(metadata.METRICS)


class Run:
    """A healthy MLP run: <input>, fc0, relu0, fc1, relu1, fc2, <loss>, <optimizer>.

    ``row(step)`` gives the healthy statistics; tests edit the returned array
    to plant a failure. Values are noisy so that the rules see realistic
    fluctuations.
    """

    def __init__(self, hidden=2, stats_every=10, seed=0, scaler=False):
        names = ["<input>"]
        types = ["input"]
        for i in range(hidden):
            names += [f"fc{i}", f"relu{i}"]
            types += ["Linear", "ReLU"]
        names += [f"fc{hidden}", "<loss>", "<optimizer>"]
        types += ["Linear", "loss", "optimizer"]
        self.layers = [{"name": n, "type": t} for n, t in zip(names, types)]
        self.names = names
        self.params = [i for i, t in enumerate(types) if t == "Linear"]
        self.relus = [i for i, t in enumerate(types) if t == "ReLU"]
        self.stats_every = stats_every
        self.rng = np.random.default_rng(seed)
        self.scaler = scaler
        self.lr = 0.01

    def i(self, name):
        return self.names.index(name)

    def full(self, step):
        return step < self.stats_every or step % self.stats_every == 0

    def row(self, step):
        r = np.full((len(self.layers), NM), np.nan, np.float32)
        rng = self.rng
        full = self.full(step)
        r[0, [M["act_mean"], M["act_std"], M["act_absmax"], M["act_nonfinite"]]] = [
            rng.normal(0, 0.05), 1 + rng.normal(0, 0.05), 3.5 + rng.random(), 0]
        r[0, M["act_zero_frac"]] = 0
        mods = [k for k in range(1, len(self.layers) - 2)]
        for k in mods:
            r[k, M["act_mean"]] = 0.3
            r[k, M["act_nonfinite"]] = 0
            if full:
                r[k, M["act_std"]] = 0.8 + 0.1 * rng.random()
                r[k, M["act_absmax"]] = 3 + rng.random()
                r[k, M["in_nonfinite"]] = 0
                if k in self.relus:
                    r[k, M["act_zero_frac"]] = 0.5
                    r[k, M["act_dead_frac"]] = 0.05 + 0.05 * rng.random()
        for k in self.params:
            r[k, M["grad_norm"]] = 0.1 * np.exp(rng.normal(0, 0.3)) * np.exp(-step / 400)
            r[k, M["grad_nonfinite"]] = 0
            r[k, M["grad_missing"]] = 0
            if full:
                r[k, M["weight_norm"]] = 5.0
                r[k, M["update_ratio"]] = 1e-3 * np.exp(rng.normal(0, 0.3))
        loss = self.i("<loss>")
        r[loss, M["value"]] = 1.2 * np.exp(-step / 150) + 0.2 + 0.1 * rng.random()
        r[loss, M["act_nonfinite"]] = 0
        r[-1, M["value"]] = self.lr
        if self.scaler:
            r[-1, M["scale"]] = 65536.0
        return r


def dying(run, r, factor=1.3):
    """What dying units cost: the loss of row ``r`` raised by ``factor``
    (a layer that loses most of its units loses what they did for the loss;
    units that go quiet at no cost are a sparse code, not dead:
    docs/diagnosis.md, "Dead is what cannot learn"). The rise is judged on
    a block of ten losses: tests planting a death at a measured step let
    the units die, and the loss rise, over the unmeasured steps before it."""
    r[run.i("<loss>"), M["value"]] *= factor


def feed(engine, run, steps, plant=None):
    """Feed rows; ``plant(step, row)`` edits each row before it is fed."""
    out = []
    for s in steps:
        r = run.row(s)
        if plant is not None:
            plant(s, r)
        out.extend(engine.update(s, r))
    assert_root_cause_is_an_event(engine)
    return out


def assert_root_cause_is_an_event(engine):
    """The root cause is always one of the events (the UI tags it in the list)."""
    rc = engine.root_cause
    if rc is not None:
        keys = {(e.kind, e.layer, e.step) for e in engine.events}
        assert (rc["kind"], rc["layer"], rc["step"]) in keys, (rc, sorted(keys, key=str))


def failures(engine):
    return [e for e in engine.events if e.severity != "info"]


# ------------------------------------------------------------------ healthy


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_healthy_run_is_silent(seed):
    run = Run(hidden=4, seed=seed)
    eng = Engine(run.layers, num_classes=None)
    feed(eng, run, range(600))
    eng.finish()
    assert eng.events == []
    assert eng.status == "healthy" and eng.root_cause is None
    assert set(eng.states.tolist()) <= {S["healthy"], metadata.STATE_UNKNOWN}


def test_states_unknown_for_rows_without_data():
    run = Run()
    eng = Engine(run.layers)
    r = run.row(0)
    r[run.i("relu0")] = np.nan
    eng.update(0, r)
    assert eng.states[run.i("relu0")] == metadata.STATE_UNKNOWN
    assert eng.states[run.i("fc0")] == S["healthy"]
    assert eng.states.dtype == np.uint8 and eng.states.shape == (len(run.layers),)


# --------------------------------------------------------------- the API


def test_rejects_bad_rows_and_steps():
    run = Run()
    eng = Engine(run.layers)
    with pytest.raises(ValueError, match="shape"):
        eng.update(0, np.zeros((3, NM), np.float32))
    eng.update(5, run.row(5))
    eng.update(5, run.row(5))  # a repeated step is diagnosed, not refused
    eng.update(4, run.row(4))
    with pytest.raises(TypeError):
        Engine(run.layers, thresholds={"dead_frac": 0.5})
    with pytest.raises(TypeError):
        Engine(["fc0"])


def test_thresholds_validate_and_override():
    with pytest.raises(ValueError):
        Thresholds(dead_frac=-1)
    with pytest.raises(ValueError):
        Thresholds(persist_steps=0)
    t = dataclasses.replace(Thresholds(), dead_frac=0.99)
    assert t.dead_frac == 0.99 and Thresholds().to_dict()["dead_frac"] == Thresholds().dead_frac


def test_event_to_dict_is_strict_json():
    e = Event(3, "fc1", "nonfinite", "healthy", "nonfinite", float("nan"), "error", "m",
              {"value_before": float("inf"), "origin": "fc0"})
    d = e.to_dict()
    assert list(d)[:8] == ["step", "layer", "kind", "from_state", "to_state", "value", "severity", "message"]
    assert d["value"] is None and d["value_before"] is None and d["origin"] == "fc0"
    json.dumps(d, allow_nan=False)


# ----------------------------------------------------------- non-finite


def test_forward_nonfinite_origin_is_first_module_in_forward_order():
    run = Run()
    eng = Engine(run.layers)
    bad_from = run.i("relu0")

    def plant(s, r):
        if s >= 37:
            r[bad_from:run.i("<loss>") + 1, M["act_nonfinite"]] = 1
            r[run.params, M["grad_nonfinite"]] = 1
            r[run.params, M["grad_norm"]] = np.nan

    new = feed(eng, run, range(37), plant)
    assert new == []
    new = feed(eng, run, [37], plant)  # confirmed at once: a NaN is never healthy
    assert {e.kind for e in new} == {"nonfinite"}
    assert eng.status == "failing"
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("nonfinite", "relu0", 37)
    assert "born inside this module" in rc["message"]
    assert "Or its weights" not in rc["message"]  # (no parameters: only its ops)


def test_a_nonfinite_output_born_in_a_layer_with_weights_names_them_too():
    # Adam with eps=0 (optax#1769, pytorch#26218): rows that got no gradient
    # update by 0/0, and the next forward is born non-finite in that layer
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        if s >= 37:
            r[run.i("fc1"):run.i("<loss>") + 1, M["act_nonfinite"]] = 1

    feed(eng, run, range(40), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("nonfinite", "fc1", 37)
    assert "born inside this module" in rc["message"] and "Or its weights" in rc["message"]
    assert "eps=0" in rc["message"]


def test_backward_nonfinite_origin_is_deepest_layer_and_beats_later_forward_nan():
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        if s >= 41:  # an inf gradient from fc1 down (backward order: fc2, fc1, fc0)
            r[[run.i("fc0"), run.i("fc1")], M["grad_norm"]] = np.inf
            r[[run.i("fc0"), run.i("fc1")], M["grad_nonfinite"]] = 3
        if s >= 42:  # the update made the weights NaN: now the forward is NaN too
            r[1:run.i("<loss>") + 1, M["act_nonfinite"]] = 1

    feed(eng, run, range(60), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("nonfinite", "fc1", 41)
    assert "backward" in rc["message"]


def _gout(run, r, bad=()):
    """Output-gradient flags (gout_nonfinite) of every module row; ``bad`` names
    the rows whose output gradient is non-finite."""
    r[1:run.i("<loss>"), M["gout_nonfinite"]] = 0
    for name in bad:
        r[run.i(name), M["gout_nonfinite"]] = 1


def _inf_grads(run, r, names):
    idx = [run.i(n) for n in names]
    r[idx, M["grad_norm"]] = np.inf
    r[idx, M["grad_nonfinite"]] = 3


def test_backward_origin_is_a_parameterless_module_with_a_bad_backward():
    # relu1's backward (say a custom autograd Function) returns inf: its output
    # gradient is finite, the one it passes on to fc1's output is not
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        _gout(run, r, ["fc0", "relu0", "fc1"] if s >= 41 else [])
        if s >= 41:
            _inf_grads(run, r, ["fc0", "fc1"])
        if s >= 42:  # the update made the weights NaN: now the forward is NaN too
            r[1:run.i("<loss>") + 1, M["act_nonfinite"]] = 1
            _gout(run, r, ["fc0", "relu0", "fc1", "relu1", "fc2"])

    feed(eng, run, range(60), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("nonfinite", "relu1", 41)
    assert "born in this module's backward" in rc["message"] and "input" in rc["message"]
    by_layer = {e.layer: e for e in failures(eng) if e.step == 41}
    assert set(by_layer) == {"fc0", "fc1", "relu1"}
    assert "received from the layers after it" in by_layer["fc1"].message
    # the forward events of step 42 say the values were propagated, not born
    fwd = [e for e in failures(eng) if e.step == 42 and e.extra.get("side") == "forward"]
    assert fwd and all("born inside" not in e.message and "code just before" not in e.message
                       for e in fwd[1:])
    assert all("received from" in e.message for e in fwd[1:])


def test_backward_origin_is_a_parameter_layer_with_a_finite_output_gradient():
    run = Run()

    def plant_params(s, r):  # only fc1's own parameter gradients are bad
        _gout(run, r)
        if s >= 41:
            _inf_grads(run, r, ["fc1"])

    eng = Engine(run.layers)
    feed(eng, run, range(50), plant_params)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("nonfinite", "fc1", 41)
    assert "parameters' gradients" in rc["message"]

    def plant_input(s, r):  # fc2 passes an inf gradient on to its input
        _gout(run, r, ["fc0", "relu0", "fc1", "relu1"] if s >= 41 else [])
        if s >= 41:
            _inf_grads(run, r, ["fc0", "fc1"])

    eng = Engine(run.layers)
    feed(eng, run, range(50), plant_input)
    rc = eng.root_cause
    # not fc1, the deepest layer with non-finite parameter gradients
    assert (rc["kind"], rc["layer"], rc["step"]) == ("nonfinite", "fc2", 41)
    assert "gradient it passes on to its input" in rc["message"]


def test_a_gradient_born_in_the_losss_backward_is_the_losss():
    # a contrastive loss's sqrt of a zero distance (pytorch#2421): the loss is
    # finite, the gradient it hands the model's output is not, so every
    # module received it; it is born in the loss, not in fc2
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        _gout(run, r, ["fc0", "relu0", "fc1", "relu1", "fc2"] if s == 41 else [])
        if s == 41:
            _inf_grads(run, r, ["fc0", "fc1", "fc2"])

    feed(eng, run, range(60), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("nonfinite", "<loss>", 41)
    assert "born in the loss's backward" in rc["message"]
    mine = [e for e in eng.events if e.layer == "<loss>"]
    assert [(e.step, e.to_state) for e in mine] == [(41, "nonfinite"), (42, "healthy")]  # once clean again

    eng = Engine(run.layers)  # where one module's backward is the origin, not the loss
    feed(eng, run, range(60), lambda s, r: (_gout(run, r, ["fc0", "relu0"] if s == 41 else []),
                                          s == 41 and _inf_grads(run, r, ["fc0", "fc1"])))
    assert eng.root_cause["layer"] == "fc1"
    assert all(e.layer != "<loss>" for e in eng.events)


def test_backward_origin_without_the_output_gradient_column_is_the_deepest_layer():
    # older logs: gout_nonfinite is NaN everywhere (the same failure as the
    # parameterless one above, which cannot be seen without the column)
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        if s >= 41:
            _inf_grads(run, r, ["fc0", "fc1"])

    feed(eng, run, range(50), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("nonfinite", "fc1", 41)
    assert "while the forward pass was finite" in rc["message"]
    assert {e.layer for e in failures(eng)} == {"fc0", "fc1"}


def test_healthy_run_with_output_gradients_is_silent():
    run = Run(hidden=4)
    eng = Engine(run.layers)
    feed(eng, run, range(300), lambda s, r: _gout(run, r))
    assert eng.events == [] and eng.status == "healthy"


def test_gradient_events_after_a_nonfinite_forward_do_not_claim_it_was_finite():
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        if s >= 37:  # born at relu0's output; fc1's input is relu0's output
            r[run.i("relu0"):run.i("<loss>") + 1, M["act_nonfinite"]] = 1
            r[run.i("fc1"):run.i("<loss>"), M["in_nonfinite"]] = 1
            _inf_grads(run, r, ["fc0", "fc1", "fc2"])

    feed(eng, run, range(45), plant)
    rc = eng.root_cause
    assert (rc["layer"], rc["step"]) == ("relu0", 37)
    evs = {(e.layer, e.extra.get("side")): e for e in failures(eng)}
    assert "forward pass was finite" not in evs[("fc1", "backward")].message
    assert "already non-finite" in evs[("fc1", "backward")].message
    m = evs[("fc1", "forward")].message
    assert "received from relu0" in m and "code just before" not in m
    assert "received from" in evs[("<loss>", "loss")].message or "already" in evs[("<loss>", "loss")].message


def test_nonfinite_gradients_with_a_gradscaler_are_the_scalers_business():
    run = Run(scaler=True)
    eng = Engine(run.layers)

    def plant(s, r):
        if s in (20, 21, 22):  # a few overflowing steps: the scaler backs off
            r[run.params, M["grad_norm"]] = np.inf
            r[run.params, M["grad_nonfinite"]] = 1
        r[-1, M["scale"]] = 65536.0 / (2 ** min(3, max(0, s - 20)))

    feed(eng, run, range(200), plant)
    assert eng.events == []


def test_scaler_collapse_onset_and_origin():
    run = Run(scaler=True)
    eng = Engine(run.layers)
    at = 30

    def plant(s, r):
        if s >= at:  # persistent inf gradient born at fc1
            r[[run.i("fc0"), run.i("fc1")], M["grad_norm"]] = np.inf
            r[[run.i("fc0"), run.i("fc1")], M["grad_nonfinite"]] = 1
        # the scale is recorded before scaler.update(): halved from the next step
        r[-1, M["scale"]] = 65536.0 / (2 ** max(0, s - at))

    feed(eng, run, range(at + Thresholds().scaler_backoffs + 5), plant)
    # the collapse is reported, and the root is where the inf is born (DESIGN:
    # the collapse is the symptom), an event of its own
    ev, root = failures(eng)
    assert (ev.kind, ev.layer, ev.step) == ("scaler_collapse", "<optimizer>", at)
    assert ev.extra["origin"] == "fc1" and "fc1" in ev.message
    assert (root.kind, root.layer, root.step) == ("nonfinite", "fc1", at) and root.extra["attribution"]
    assert {k: eng.root_cause[k] for k in ("kind", "layer", "step")} == {"kind": "nonfinite", "layer": "fc1", "step": at}
    assert "GradScaler" in eng.root_cause["message"] and eng.status == "failing"


# -------------------------------------------------------- vanishing / dead


def test_vanishing_root_is_deepest_dead_layer_below_the_vanishing_ones():
    run = Run(hidden=3)
    eng = Engine(run.layers)
    at = 100

    def plant(s, r):
        if s > at - 10:
            dying(run, r)
        if s >= at:
            for n in ("fc0", "fc1", "fc2"):
                r[run.i(n), M["grad_norm"]] *= 1e-6
            if run.full(s):
                r[run.i("relu2"), M["act_dead_frac"]] = 0.97

    feed(eng, run, range(200), plant)
    kinds = {(e.layer, e.kind) for e in failures(eng)}
    assert {("fc0", "vanishing_gradient"), ("fc2", "vanishing_gradient"),
            ("relu2", "dead_activation")} <= kinds
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("dead_activation", "relu2", at)
    assert eng.status == "failing"  # a warning-level failure is still a failure


def test_vanishing_without_a_blocker_names_the_deepest_vanishing_layer():
    run = Run(hidden=3)
    eng = Engine(run.layers)

    def plant(s, r):
        r[run.i("fc0"), M["grad_norm"]] *= 1e-7
        r[run.i("fc1"), M["grad_norm"]] *= 1e-5

    feed(eng, run, range(40), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("vanishing_gradient", "fc1", 0)
    ev = [e for e in failures(eng) if e.layer == "fc1"][0]
    # (vanishing from the first step: confirmed over persist_vanishing_born steps)
    assert ev.extra["born_failing"] is True and ev.extra["confirmed_step"] == Thresholds().persist_vanishing_born - 1


def test_tiny_gradient_inside_a_branch_is_not_vanishing():
    """Only fc1 is tiny (e.g. a zero-initialised BatchNorm after it in a
    residual branch): the layer before it is fine, so gradients do not vanish."""
    run = Run(hidden=3)
    eng = Engine(run.layers)
    feed(eng, run, range(100), lambda s, r: r.__setitem__((run.i("fc1"), M["grad_norm"]), 1e-9))
    assert failures(eng) == []


def test_dead_measured_every_tenth_step_confirms_on_measurements():
    run = Run()
    eng = Engine(run.layers)
    at = 53  # planted between two measurements (50 and 60)

    def plant(s, r):
        if s >= at:
            dying(run, r)
        if s >= at and run.full(s):
            r[run.i("relu1"), M["act_dead_frac"]] = 0.9

    feed(eng, run, range(100), plant)
    (ev,) = failures(eng)
    assert (ev.kind, ev.layer, ev.step) == ("dead_activation", "relu1", 60)
    # confirmed at the third measurement (persist_steps), never between them
    assert ev.extra["confirmed_step"] == 80
    assert ev.value == pytest.approx(0.9) and ev.extra["value_before"] < 0.2


def test_functional_relu_dead_units_belong_to_the_module_before():
    """fc0 -> torch.relu (no module) -> fc1: fc1 sees dead inputs; the units
    are fc0's (its pre-activations went negative)."""
    run = Run()
    layers = [l for l in run.layers if l["name"] != "relu0"]
    keep = [i for i, l in enumerate(run.layers) if l["name"] != "relu0"]
    eng = Engine(layers)
    fc1 = [l["name"] for l in layers].index("fc1")
    for s in range(60):
        r = run.row(s)[keep]
        if s > 10:
            r[[l["name"] for l in layers].index("<loss>"), M["value"]] *= 1.3  # (dying(): relu0 is not a row here)
        if run.full(s):
            r[fc1, M["in_dead_frac"]] = 0.95 if s >= 20 else 0.1
        eng.update(s, r)
    (ev,) = failures(eng)
    assert (ev.kind, ev.layer, ev.step) == ("dead_activation", "fc0", 20)
    assert ev.value == pytest.approx(0.95) and ev.extra["value_before"] == pytest.approx(0.1)
    assert ev.extra["via"] == "functional_activation" and "functional ReLU" in ev.message


def test_dead_input_after_a_relu_module_is_not_counted_twice():
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        if run.full(s):
            r[run.i("relu0"), M["act_dead_frac"]] = 0.9
            r[run.i("fc1"), M["in_dead_frac"]] = 0.9

    feed(eng, run, range(30), plant)
    assert [(e.layer, e.kind) for e in failures(eng)] == [("relu0", "dead_activation")]


def test_single_step_blip_is_not_an_event_and_recovery_is_info():
    run = Run()
    eng = Engine(run.layers)

    def blip(s, r):
        if s == 120:
            r[run.i("fc1"), M["grad_norm"]] *= 1e5

    feed(eng, run, range(200), blip)
    # no failure: at most the note that a burst did no harm (a clip's work)
    (note,) = eng.events
    assert (note.severity, note.kind, note.layer, note.step) == ("info", "exploding_gradient", "fc1", 120)
    assert "burst" in note.message and eng.status == "healthy"

    eng = Engine(run.layers)

    def episode(s, r):
        if 90 < s < 130:
            dying(run, r)
        if 100 <= s < 130 and run.full(s):
            r[run.i("relu0"), M["act_dead_frac"]] = 0.95

    feed(eng, run, range(300), episode)
    fail, rec = eng.events
    assert (fail.to_state, fail.severity, fail.step) == ("dead", "warning", 100)
    assert (rec.from_state, rec.to_state, rec.severity, rec.kind) == ("dead", "healthy", "info", "dead_activation")
    assert rec.step == 130 and "recovered" in rec.message


def test_saturated_and_collapsed_activations():
    run = Run()
    layers = list(run.layers)
    layers[run.i("relu0")] = {"name": "relu0", "type": "Tanh"}
    eng = Engine(layers)

    def plant(s, r):
        if run.full(s):
            r[run.i("relu0"), M["act_dead_frac"]] = np.nan
            r[run.i("relu0"), M["act_sat_frac"]] = 0.9 if s >= 200 else 0.02
            if s >= 300:  # fc1 outputs one constant value
                r[run.i("fc1"), M["act_std"]] = 0.0
                r[run.i("fc1"), M["act_absmax"]] = 0.7

    feed(eng, run, range(400), plant)
    got = [(e.layer, e.kind, e.step) for e in failures(eng)]
    assert got == [("relu0", "saturated_activation", 200), ("fc1", "activation_collapse", 300)]
    assert eng.root_cause["layer"] == "relu0"


# ------------------------------------------------------------- exploding


def test_exploding_against_own_history_and_lr_jump_blames_optimizer():
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        if s >= 98:
            r[-1, M["value"]] = 1.0  # lr x100
        if s >= 100:
            r[run.params, M["grad_norm"]] *= 10.0 ** min(6, s - 99)

    feed(eng, run, range(110), plant)
    ev = failures(eng)[0]
    assert ev.kind == "exploding_gradient" and ev.step >= 100
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("exploding_gradient", "<optimizer>", 98)
    assert "learning rate" in rc["message"] and eng.status == "failing"


def test_activation_explosion_after_lr_jump_is_the_optimizers_with_its_own_event():
    """Many layers blow up right after the rate rose: <optimizer>, named
    exploding_gradient whichever symptom (here the activations) shows first,
    and an <optimizer> event carries it (value: the new learning rate)."""
    run = Run(stats_every=1)
    eng = Engine(run.layers)

    def plant(s, r):
        if s >= 100:
            r[-1, M["value"]] = 1.0  # lr x100
        if s >= 106:
            for n in ("fc0", "relu0", "fc1", "relu1", "fc2"):
                for c in ("act_std", "act_absmax", "act_mean"):
                    r[run.i(n), M[c]] *= 10.0 ** min(8, 2 * (s - 105))

    feed(eng, run, range(130), plant)
    kinds = {e.kind for e in failures(eng) if e.layer != "<optimizer>"}
    assert "activation_explosion" in kinds and "exploding_gradient" not in kinds
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("exploding_gradient", "<optimizer>", 100)
    (ev,) = [e for e in eng.events if e.layer == "<optimizer>" and e.kind == rc["kind"]]
    assert (ev.step, ev.from_state, ev.to_state, ev.severity) == (100, "healthy", "exploding", "error")
    assert ev.value == pytest.approx(1.0) and "learning rate" in ev.message
    assert ev.extra["symptom_kind"] == "activation_explosion"


def test_warmup_from_tiny_lr_is_not_a_jump_to_blame():
    """LinearLR(start_factor=1e-3): the rate grows x100 from step 0 to 1 on
    purpose; a NaN born in a module at step 15 is still that module's."""
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        r[-1, M["value"]] = 0.01 * min(1.0, 1e-3 + s / 20)
        if s >= 15:
            r[run.i("fc1"):run.i("<loss>") + 1, M["act_nonfinite"]] = 1

    feed(eng, run, range(20), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("nonfinite", "fc1", 15)


def test_exploding_gradient_without_lr_change_names_the_highest_norm():
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        if s >= 150:
            r[run.i("fc0"), M["grad_norm"]] *= 1e3
            r[run.i("fc1"), M["grad_norm"]] *= 1e4

    feed(eng, run, range(170), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("exploding_gradient", "fc1", 150)


def test_born_exploding_activation_names_the_amplifying_layer():
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        if run.full(s):  # fc1 multiplies its input by ~1000 from the start
            for n in ("fc1", "relu1", "fc2"):
                r[run.i(n), M["act_std"]] *= 1000
                r[run.i(n), M["act_absmax"]] *= 1000
                r[run.i(n), M["act_mean"]] *= 1000

    feed(eng, run, range(20), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("activation_explosion", "fc1", 0)


# -------------------------------------------------------------- cut off


def test_no_gradient_names_the_highest_cut_off_layer():
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        for n in ("fc0", "fc1"):
            r[run.i(n), M["grad_missing"]] = 2
            r[run.i(n), M["grad_norm"]] = np.nan
            r[run.i(n), M["update_ratio"]] = np.nan if not run.full(s) else 0.0

    feed(eng, run, range(20), plant)
    assert {e.kind for e in failures(eng)} == {"no_gradient"}
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("no_gradient", "fc1", 0)


def test_frozen_weights_and_not_when_lr_is_zero():
    run = Run()
    eng = Engine(run.layers)

    def plant(s, r):
        if run.full(s):
            r[run.i("fc0"), M["update_ratio"]] = 0.0

    feed(eng, run, range(20), plant)
    (ev,) = failures(eng)
    assert (ev.kind, ev.layer, ev.step) == ("frozen_weights", "fc0", 0)

    run = Run()
    run.lr = 0.0  # nothing may move: warmup from zero
    eng = Engine(run.layers)

    def still(s, r):
        if run.full(s):
            r[run.params, M["update_ratio"]] = 0.0

    feed(eng, run, range(20), still)
    assert eng.events == []


# --------------------------------------------------------------- <input>


@pytest.mark.parametrize("kind", ["nan", "scale", "tiny", "constant", "shift"])
def test_bad_batch_is_a_data_anomaly_at_input(kind):
    run = Run()
    eng = Engine(run.layers)
    at = 77

    def plant(s, r):
        if s != at:
            return
        if kind == "nan":
            r[0, M["act_nonfinite"]] = 4
        elif kind == "scale":
            r[0, [M["act_std"], M["act_absmax"]]] *= 1000
        elif kind == "tiny":
            r[0, [M["act_std"], M["act_absmax"]]] *= 1e-3
        elif kind == "constant":
            r[0, [M["act_mean"], M["act_std"], M["act_absmax"]]] = [1.0, 0.0, 1.0]
        else:
            r[0, M["act_mean"]] = 30.0
            r[0, M["act_absmax"]] = 34.0

    feed(eng, run, range(120), plant)
    fail, rec = eng.events
    assert (fail.kind, fail.layer, fail.step, fail.severity) == ("data_anomaly", "<input>", at, "error")
    assert rec.severity == "info" and rec.step == at + 1
    assert eng.root_cause["layer"] == "<input>" and eng.root_cause["step"] == at


def test_unnormalised_inputs_blame_input_when_first_layer_fails_at_once():
    run = Run()
    layers = list(run.layers)
    layers[run.i("relu0")] = {"name": "relu0", "type": "Tanh"}
    eng = Engine(layers)

    def plant(s, r):
        r[0, [M["act_mean"], M["act_std"], M["act_absmax"]]] *= 255
        if run.full(s):
            r[run.i("relu0"), M["act_dead_frac"]] = np.nan
            r[run.i("relu0"), M["act_sat_frac"]] = 0.95

    feed(eng, run, range(30), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("saturated_activation", "<input>", 0)
    assert "normalis" in rc["message"]


# ---------------------------------------------------------------- <loss>


def test_loss_spike_persists_and_an_outlier_batch_does_not():
    run = Run()
    eng = Engine(run.layers)
    li = run.i("<loss>")

    def plant(s, r):
        if s == 100 or 150 <= s < 156:  # one outlier batch; then a divergence
            r[li, M["value"]] = 40.0
        if s >= 180:
            r[li, M["value"]] = np.inf
            r[li, M["act_nonfinite"]] = 1

    feed(eng, run, range(200), plant)
    got = [(e.kind, e.to_state, e.step) for e in eng.events]
    assert got[0] == ("loss_spike", "loss_spike", 150)
    assert ("nonfinite", "nonfinite", 180) in got and all(step != 100 for _, _, step in got)
    # the spike (a warning) came first; the non-finite loss (error) is not before it
    assert eng.root_cause["kind"] == "loss_spike" and eng.status == "failing"


def test_unconfirmed_spike_overtaken_by_nonfinite_is_reported_first():
    run = Run()
    eng = Engine(run.layers)
    li = run.i("<loss>")

    def plant(s, r):
        if s == 150:
            r[li, M["value"]] = 400.0
        if s >= 151:
            r[li, M["value"]] = np.nan
            r[li, M["act_nonfinite"]] = 1

    feed(eng, run, range(160), plant)
    got = [(e.kind, e.from_state, e.to_state, e.step) for e in failures(eng)]
    assert got == [("loss_spike", "healthy", "loss_spike", 150), ("nonfinite", "loss_spike", "nonfinite", 151)]
    assert eng.root_cause["step"] == 150


def test_loss_plateau_when_the_loss_never_falls():
    run = Run()
    eng = Engine(run.layers, num_classes=4)
    li = run.i("<loss>")
    flat = lambda s, r: r.__setitem__((li, M["value"]), 1.386 + 0.05 * run.rng.normal())  # noqa: E731
    feed(eng, run, range(Thresholds().plateau_min_steps + 20), flat)
    (ev,) = failures(eng)
    assert (ev.kind, ev.layer, ev.step) == ("loss_plateau", "<loss>", 0)
    assert ev.extra["confirmed_step"] >= Thresholds().plateau_min_steps - 1


def _loss_curve(curve, k=None, n=None):
    run = Run()
    eng = Engine(run.layers, num_classes=k)
    li = run.i("<loss>")
    n = n or Thresholds().plateau_min_steps + 200
    feed(eng, run, range(n), lambda s, r: r.__setitem__((li, M["value"]), curve(s, run.rng)))
    eng.finish()
    return [e for e in failures(eng) if e.kind == "loss_plateau"], eng


def test_a_loss_that_fell_within_its_first_window_to_a_floor_is_no_plateau():
    """Label smoothing 0.3 over 8 classes: the loss falls from ln 8 to its
    floor near 1.1 within the first ten steps, then stays there. Its first
    level (a median of plateau_window losses) is already the floor, but the
    loss fell: a converged run. The same floor from the first step on, with
    K unknown, is a loss that never fell."""
    import math

    fell, _ = _loss_curve(lambda s, rng: 1.1 + (math.log(8) - 1.1) * math.exp(-s / 3) + 0.02 * rng.normal())
    assert fell == []
    never, _ = _loss_curve(lambda s, rng: 1.1 + 0.02 * rng.normal())
    assert [(e.layer, e.step) for e in never] == [("<loss>", 0)]


def test_falling_then_diverged_loss_is_not_a_plateau():
    """The loss fell 10x, then diverged above where it started: the diverged
    tail is not a plateau, and nothing is back-dated to step 0."""
    def curve(s, rng):
        if s < 250:
            return 1.0 * np.exp(-s / 60) + 0.05 + 0.01 * rng.random()
        return 2.5 + 0.5 * rng.random()
    plateaus, eng = _loss_curve(curve)
    assert plateaus == []
    assert [e.kind for e in failures(eng)] == ["loss_spike"]


def test_falling_then_flat_at_chance_has_its_onset_where_it_flattened():
    """K=4: from 2.2 down to ln 4 by step ~100, then stuck there: a plateau at
    chance level from where it stopped falling (within a window of 50 steps)."""
    lnk = np.log(4)
    curve = lambda s, rng: max(lnk, 2.2 - 0.009 * s) + 0.03 * rng.normal()  # noqa: E731
    plateaus, eng = _loss_curve(curve, k=4, n=500)
    (ev,) = plateaus
    assert 60 <= ev.step <= 150 and ev.extra["reason"] == "chance"
    assert eng.root_cause["step"] == ev.step


def test_falling_then_flat_below_chance_is_a_converged_run():
    curve = lambda s, rng: max(0.3, 2.2 - 0.02 * s) + 0.03 * rng.normal()  # noqa: E731
    plateaus, eng = _loss_curve(curve, k=4, n=600)
    assert plateaus == [] and eng.root_cause is None
    plateaus, eng = _loss_curve(curve, k=None, n=600)  # K unknown: the same
    assert plateaus == [] and eng.root_cause is None


def test_resumed_run_is_not_judged_from_its_start():
    """A run resumed at step 1000 (start_step) may start converged: no
    plateau and no initial-loss check, unless it sits at chance level."""
    run = Run()
    li = run.i("<loss>")
    n = Thresholds().plateau_min_steps + 20
    eng = Engine(run.layers, num_classes=4)
    feed(eng, run, range(1000, 1000 + n), lambda s, r: r.__setitem__((li, M["value"]), 0.05 + 0.01 * run.rng.random()))
    assert eng.events == []
    eng = Engine(run.layers, num_classes=4)
    feed(eng, run, range(1000, 1000 + n), lambda s, r: r.__setitem__((li, M["value"]), 1.39 + 0.05 * run.rng.random()))
    assert [e.kind for e in eng.events] == ["loss_plateau"]


def test_short_flat_run_gets_its_plateau_at_finish_only():
    run = Run()
    eng = Engine(run.layers)
    li = run.i("<loss>")
    n = Thresholds().plateau_min_steps // 2 + 10
    feed(eng, run, range(n), lambda s, r: r.__setitem__((li, M["value"]), 2.0 + 0.01 * run.rng.normal()))
    assert eng.events == []
    (ev,) = eng.finish()
    assert ev.kind == "loss_plateau" and eng.finish() == []


@pytest.mark.parametrize("k,loss0,expect", [
    (10, 2.35, False), (10, 35.0, True), (2, 0.72, False), (2, 3.5, True),
    (10, 0.2, False),  # below chance: a pretrained model, not a failure
    (10, -0.3, True),  # impossible for cross-entropy: e.g. NLLLoss on raw logits
])
def test_initial_loss_against_ln_k(k, loss0, expect):
    run = Run()
    eng = Engine(run.layers)
    eng.num_classes = k  # may be set before the first loss
    li = run.i("<loss>")
    feed(eng, run, range(30), lambda s, r: r.__setitem__((li, M["value"]), loss0 if s == 0 else 0.5))
    got = [e for e in eng.events if e.kind == "initial_loss"]
    assert bool(got) == expect
    if expect:
        assert (got[0].step, got[0].layer, got[0].extra["num_classes"]) == (0, "<loss>", k)
        assert f"ln({k})" in got[0].message


def test_an_initial_loss_that_then_fell_does_not_outrank_a_later_failure():
    # ArcFace (s=30, m=0.5) starts near 30 for 4 classes by design, learns,
    # then its sqrt(1 - cos^2) backward turns NaN at step 40
    # (ronghuaiyang/arcface-pytorch#68): the NaN is the root, not the start
    for nan_at in (40, None):
        run = Run()
        eng = Engine(run.layers)
        eng.num_classes = 4
        li = run.i("<loss>")

        def plant(s, r):
            r[li, M["value"]] = 30.0 if s == 0 else 1.0 / (1 + s)
            if nan_at is not None and s >= nan_at:
                r[[run.i("fc0"), run.i("fc1")], M["grad_norm"]] = np.inf
                r[[run.i("fc0"), run.i("fc1")], M["grad_nonfinite"]] = 3

        feed(eng, run, range(60), plant)
        assert any(e.kind == "initial_loss" for e in eng.events)  # still told
        rc = eng.root_cause
        want = ("nonfinite", "fc1", 40) if nan_at is not None else ("initial_loss", "<loss>", 0)
        assert (rc["kind"], rc["layer"], rc["step"]) == want


# --------------------------------------------------------------- layers


def test_add_layers_grows_every_array_and_new_layers_can_fail():
    run = Run()
    eng = Engine(run.layers)
    feed(eng, run, range(10))
    eng.add_layers([{"name": "late", "type": "ReLU"}])
    assert eng.states.shape == (len(run.layers) + 1,)
    for s in range(10, 20):
        r = np.concatenate([run.row(s), np.full((1, NM), np.nan, np.float32)])
        r[-1, [M["act_std"], M["act_absmax"], M["act_dead_frac"], M["act_mean"]]] = [0, 0, 1.0, 0]
        eng.update(s, r)
    (ev,) = failures(eng)
    assert (ev.layer, ev.kind, ev.step) == ("late", "dead_activation", 10)
    assert ev.extra["born_failing"] is True


# ----------------------------------------------------------- state table

#: the variants of a kind's message head (the extra fields that choose them)
_HEAD_VARIANTS = {
    "nonfinite": [{"side": "backward", "forward_nonfinite": True}, {"side": "backward", "received": True},
                  {"side": "backward", "bwd_origin": True, "via": "input"}, {"side": "backward"},
                  {"side": "loss", "from_layer": "fc0"}, {"side": "loss"},
                  {"side": "forward", "from_layer": "fc0"}, {"side": "forward", "input_nonfinite": True},
                  {"side": "forward"}],
    "data_anomaly": [{"reason": r, "std": 0.0} for r in ("nonfinite", "constant", "scale_up", "scale_down")],
    "dead_activation": [{}, {"via": "functional_activation"}, {"all_zero": True}],
    "activation_explosion": [{}, {"amplified": "cumulative"}],
    "activation_collapse": [{}, {"weight_norm": 1e-4, "weight_norm_max": 5.0}],
    "exploding_gradient": [{}, {"cause": "grad_accumulation", "layers": ["fc0", "fc1"], "layer_count": 2}],
    "frozen_weights": [{"cause": c, "group": 1} for c in ("not_in_optimizer", "lr_zero", "no_update")],
    "no_gradient": [{}, {"ran_without_grad": True}],
    "loss_spike": [{}, {"reason": "climb"}],
    "loss_plateau": [{"reason": "flat", "num_classes": 10}, {"reason": "chance", "num_classes": 10}],
    "initial_loss": [{"num_classes": 10}],
    "scaler_collapse": [{}, {"origin": "fc0", "origin_side": "forward"}],
}
#: kinds whose cause depends on the event (where the value was born, what is
#: wrong with the batch): each variant of their head says it (explain.CAUSES)
_CAUSE_IN_HEAD = {"nonfinite", "data_anomaly"}


def test_every_state_of_the_table_is_known_to_the_diagnosis():
    """Walk metadata.STATE_TABLE: every failing state has an event kind of the
    contract that the engine maps, a persistence, and a message with a
    specific head (never the fallback "x -> y") and a cause text; every kind
    of the contract is produced by some state."""
    from tb_neuraldbg.diagnosis import engine, explain

    persist = engine.persistence(Thresholds())
    assert len(persist) == len(metadata.STATE_TABLE)
    produced = set()
    for s in metadata.STATE_TABLE:
        assert persist[s.code] >= 1, s.name
        if s.name == "healthy":
            assert s.kind is None and s.name not in engine.EVENT_KIND
            continue
        assert s.kind in metadata.KINDS, s.name
        assert engine.EVENT_KIND[s.name] == s.kind
        assert s.severity in ("warning", "error"), s.name
        assert s.evidence in metadata.METRIC_INDEX, s.name
        produced.add(s.kind)
        cause = explain.CAUSES.get(s.kind)
        assert (cause is not None) != (s.kind in _CAUSE_IN_HEAD), s.kind
        for extra in _HEAD_VARIANTS.get(s.kind, [{}]):
            for layer, kind_of_layer in (("fc1", "Linear"), ("<loss>", "loss")):
                msg = explain.event_message(s.kind, layer, kind_of_layer, "healthy", s.name, 7, 2.0, 1.0, extra)
                assert f"healthy -> {s.name}" not in msg, (s.kind, extra, msg)
                assert cause is None or msg.endswith(" " + explain.advice(s.kind, kind_of_layer, extra)), (
                    s.kind, extra, msg)
                # recovering from the state has its own wording too
                back = explain.event_message(s.kind, layer, kind_of_layer, s.name, "healthy", 9, 1.0, 2.0, extra)
                assert "recovered from" in back, back
    assert set(metadata.KINDS) <= produced, set(metadata.KINDS) - produced


#: module types, and the kinds of event that can occur on each: gradient
#: and weight kinds where there are parameters, saturation on bounded
#: activations, the activation kinds and non-finite values everywhere
_PARAMETRISED = ("Linear", "Conv2d", "ConvTranspose2d", "BatchNorm2d", "LayerNorm", "GroupNorm", "RMSNorm",
                 "Embedding", "EmbeddingBag", "LSTM", "GRU", "RNN", "MultiheadAttention", "PReLU", "MyBlock")
_PARAMETERLESS = ("ReLU", "ReLU6", "LeakyReLU", "GELU", "SiLU", "ELU", "Tanh", "Sigmoid", "Hardtanh", "Softsign",
                  "MaxPool2d", "MyOp")
_BOUNDED = ("ReLU6", "Tanh", "Sigmoid", "Hardtanh", "Softsign")
_ON_ANY_MODULE = ("nonfinite", "dead_activation", "activation_collapse", "activation_explosion")
_ON_PARAMETERS = ("vanishing_gradient", "exploding_gradient", "frozen_weights", "no_gradient")
#: what a suggestion must not name for a module of a family (its own kind)
_SELF = {"norm": (r"\bBatchNorm\b", r"\bLayerNorm\b", r"\bGroupNorm\b", r"normalisation layer"),
         "recurrent": (r"\bLSTM\b", r"\bGRU\b")}


def _kinds_on(layer_type):
    kinds = list(_ON_ANY_MODULE)
    if layer_type in _PARAMETRISED:
        kinds += _ON_PARAMETERS
    if layer_type in _BOUNDED:
        kinds.append("saturated_activation")
    return kinds


@pytest.mark.parametrize("layer_type", _PARAMETRISED + _PARAMETERLESS)
def test_every_event_reads_well_on_every_module_type(layer_type):
    """Every event kind that can occur on a module type, with every variant
    of its message: no "n/a" where a value was measured, and no advice that
    suggests what the module already is (a dead GELU is not told to try GELU,
    a LayerNorm not to add normalisation, an LSTM not to use one)."""
    import re

    from tb_neuraldbg.diagnosis import explain

    fam = explain.family(layer_type)
    # (a vanilla RNN may be told to try an LSTM; an LSTM or GRU may not)
    gated = fam == "recurrent" and layer_type != "RNN"
    own = (rf"\b{re.escape(layer_type)}\b",) + _SELF.get(fam if fam != "recurrent" or gated else "", ())
    for kind in _kinds_on(layer_type):
        for extra in _HEAD_VARIANTS.get(kind, [{}]):
            for before in (0.2, float("nan")):  # measured before, or born failing
                msg = explain.event_message(kind, "blocks.3.x", layer_type, "healthy", "x", 40, 0.8, before, extra)
                assert "n/a" not in msg and "None" not in msg, (layer_type, kind, extra, msg)
                tried = msg.split("Try:", 1)[1] if "Try:" in msg else ""
                tried = re.sub(r"instead of (an? )?(vanilla )?[\w/.()]+", "", tried)
                for pattern in own:
                    assert not re.search(pattern, tried), (layer_type, kind, extra, msg)


def test_an_all_zero_output_is_dead_with_its_value_on_any_module():
    """A GELU or a Linear whose output is exactly 0 everywhere: dead, 100%,
    worded for what it is (not "n/a of its units", not "try GELU")."""
    run = Run()
    names = list(run.names)
    names[run.i("relu0")] = "gelu0"
    layers = [dict(l, name=n, type="GELU" if n == "gelu0" else l["type"]) for l, n in zip(run.layers, names)]
    eng = Engine(layers)

    def plant(s, r):
        if s >= 100 and run.full(s):
            for name in ("relu0", "fc1"):  # gelu0's row, and the Linear after it
                i = run.i(name)
                r[i, [M["act_mean"], M["act_std"], M["act_absmax"], M["act_zero_frac"]]] = [0, 0, 0, 1]
                r[i, M["act_dead_frac"]] = np.nan

    feed(eng, run, range(160), plant)
    dead = {e.layer: e for e in failures(eng) if e.kind == "dead_activation"}
    assert set(dead) == {"gelu0", "fc1"}
    for e in dead.values():
        assert e.value == 1.0 and e.step == 100 and "exactly 0" in e.message and "n/a" not in e.message
    assert "LeakyReLU/GELU" not in dead["gelu0"].message
    assert "weights and bias are 0" in dead["fc1"].message


# ------------------------------------------------------------ hysteresis


def test_hysteresis_counts_measured_steps_and_keeps_the_onset():
    from tb_neuraldbg.diagnosis.transitions import UNMEASURED, Hysteresis

    persist = np.full(len(metadata.STATES), 3)
    h = Hysteresis(2, persist)
    dead, healthy = S["dead"], S["healthy"]

    def ev():
        n = len(h.confirmed)
        return np.array([0.9] + [0.1] * (n - 1)), np.full(n, 0.1)

    seq = [(0, [healthy, healthy]), (1, [dead, healthy]), (2, [UNMEASURED, UNMEASURED]),
           (3, [dead, healthy]), (4, [UNMEASURED, healthy])]
    for step, raw in seq:
        assert h.update(step, np.array(raw), ev) == []
    (tr,) = h.update(5, np.array([dead, healthy]), ev)  # third measured step of the run
    assert (tr.index, tr.from_code, tr.to_code, tr.onset, tr.earliest, tr.born) == (0, healthy, dead, 1, 1, False)
    assert (tr.value, tr.value_before) == (0.9, 0.1)
    # layer 1: a run broken by its confirmed state starts again; layer 0
    # recovers after three healthy measurements
    h.update(6, np.array([healthy, dead]), ev)
    h.update(7, np.array([healthy, healthy]), ev)
    (tr,) = h.update(8, np.array([healthy, dead]), ev)
    assert (tr.index, tr.from_code, tr.to_code, tr.onset) == (0, dead, healthy, 6)
    # born failing: the onset is the first measurement; an explicit onset wins
    h.grow(3)
    h.update(10, np.array([UNMEASURED, UNMEASURED, dead]), ev, onset=np.array([-1, -1, 9]))
    h.update(11, np.array([UNMEASURED, UNMEASURED, dead]), ev)
    (tr,) = h.update(12, np.array([UNMEASURED, UNMEASURED, dead]), ev)
    assert (tr.index, tr.onset) == (2, 9)


def test_activation_shortcut_on_unmeasured_steps_moves_the_state_as_the_full_rule(monkeypatch):
    # Nine steps in ten measure no activation: the aspect takes a shortcut
    # there. Fed the same run (relu0 dying, so the dead fractions and their
    # evidence matter), an engine whose aspect always runs the full rule must
    # end in the same state with the same events.
    from tb_neuraldbg.diagnosis.aspects import activation

    def run_engine():
        run = Run(seed=3)
        eng = Engine(run.layers)

        def plant(s, r):
            if s >= 120:
                dying(run, r)
            if s >= 120 and run.full(s):
                r[run.i("relu0"), M["act_dead_frac"]] = 0.97
                r[run.i("fc1"), M["in_dead_frac"]] = 0.97

        events = [e.to_dict() for e in feed(eng, run, range(300), plant)]
        return eng, events

    fast, fast_events = run_engine()
    calls = []
    full_rule = activation.Activation._act_measured

    def always_full(self, row, conf, has_param, loss_below_first):
        measured = self._measured(row)
        calls.append(bool(measured.any()))
        return full_rule(self, row, conf, has_param, loss_below_first, measured)

    monkeypatch.setattr(activation.Activation, "_act", always_full)
    slow, slow_events = run_engine()
    assert calls.count(False) > 200  # the shortcut's steps were there to take
    assert any(e["kind"] == "dead_activation" for e in fast_events)
    assert fast_events == slow_events
    a, b = fast._clf.activation, slow._clf.activation
    for name in ("w_max", "dead_eff", "dead_last", "dead_via", "all_zero", "cumulative"):
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name
    for track in ("track", "std_track"):
        for field in ("ema", "max", "count"):
            assert np.array_equal(getattr(getattr(a, track), field), getattr(getattr(b, track), field),
                                  equal_nan=True), (track, field)


@pytest.mark.parametrize("seed", range(4))
def test_a_quiet_step_noted_alone_leaves_the_hysteresis_as_a_full_update_does(seed):
    """The engine notes a step where no measured row differs from its
    confirmed state and nothing is pending with update_quiet(): the same
    state, and the same transitions afterwards, as update()."""
    from tb_neuraldbg.diagnosis.transitions import UNMEASURED, Hysteresis

    rng = np.random.default_rng(seed)
    L, codes = 7, [UNMEASURED, 0, 0, 0, 1, 2]
    persist = np.array([4, 2, 1, 3])
    full, quick = Hysteresis(L, persist), Hysteresis(L, persist)
    quiet_steps = 0
    for step in range(300):
        raw = np.array(rng.choice(codes, L), dtype=np.int16)
        if rng.random() < 0.7:  # mostly steps that agree with what is confirmed
            raw = np.where(rng.random(L) < 0.3, UNMEASURED, full.confirmed).astype(np.int16)
        known = raw != UNMEASURED
        ev = lambda: (np.full(L, float(step)), np.zeros(L))  # noqa: E731
        expected = full.update(step, raw, ev)
        if not (known & (raw != quick.confirmed)).any() and not quick.pending:
            quiet_steps += 1
            if known.any():
                quick.update_quiet(step, known)
            got = []
        else:
            got = quick.update(step, raw, ev)
        assert got == expected
        for name in Hysteresis._ARRAYS:
            np.testing.assert_array_equal(getattr(quick, name), getattr(full, name), err_msg=name)
        assert (quick._pending, quick._all_seen) == (full._pending, full._all_seen)
    assert 30 < quiet_steps < 280


def test_a_scaler_started_far_too_high_backs_off_until_it_fits():
    """GradScaler(init_scale=2**32): the first dozen steps overflow and are
    skipped while the scale halves to ~2**20, then it fits and training goes
    on; the same dozen back-offs from the default 2**16 that never stop are a
    collapse (test_scaler_collapse_onset_and_origin)."""
    run = Run(scaler=True)
    eng = Engine(run.layers)

    def plant(s, r):
        if s < 12:  # scaled gradients overflow: skipped, the scale halves
            r[run.params, M["grad_norm"]] = np.inf
            r[run.params, M["grad_nonfinite"]] = 1
        r[-1, M["scale"]] = 2.0 ** 32 / 2 ** min(s, 12)

    feed(eng, run, range(200), plant)
    assert [e for e in failures(eng)] == [] and eng.status == "healthy"
