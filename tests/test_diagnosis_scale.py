"""Data scale and what zero or non-finite values mean, at the root cause:
inputs far below unit scale are a data anomaly of the batch (not an
explosion), regression targets far above it are the loss's, gradients exactly
0 under an output pinned at +-1 are saturation, a value born after a parent's
last watched submodule is that parent's (docs/diagnosis.md)."""

from __future__ import annotations

import math

import numpy as np

from tb_neuraldbg.diagnosis.aspects.gradient import Gradient
from tb_neuraldbg.diagnosis.aspects._base import METRIC, RowKinds
from tb_neuraldbg.diagnosis.causes import RunFacts
from tb_neuraldbg.diagnosis.chain import Failure
from tb_neuraldbg.diagnosis.events import Event
from tb_neuraldbg.diagnosis.rootcause import find_root_cause
from tb_neuraldbg.diagnosis.thresholds import Thresholds

T = Thresholds()
NAMES = ("<input>", "fc1", "act1", "fc2", "<loss>", "<optimizer>")


def _failure(kind, layer, index, step=0, born=True, value=1.0, **extra):
    ev = Event(step=step, layer=layer, kind=kind, from_state="healthy", to_state=kind, value=value,
               severity="error", message=f"{layer}: {kind}", extra=dict(extra))
    return Failure(ev, index, "act", born, step)


def _facts(**kw):
    base = dict(module_rows=(1, 2, 3), param_rows=(1, 3), names=NAMES, first_loss=(0, 1.0))
    base.update(kw)
    return RunFacts(**base)


# --- inputs far below unit scale ------------------------------------------------


def test_inputs_far_below_unit_scale_are_a_data_anomaly_of_the_batch():
    f = _failure("activation_explosion", "fc1", 1, value=150.0)
    root, ev = find_root_cause([f], _facts(input_rms0=0.002), T)
    assert (root["kind"], root["layer"], root["step"]) == ("data_anomaly", "<input>", 0)
    assert ev.extra["direction"] == "too_small" and "below unit scale" in root["message"]


def test_inputs_far_above_unit_scale_keep_the_symptom_kind():
    f = _failure("saturated_activation", "fc1", 1)
    root, ev = find_root_cause([f], _facts(input_rms0=600.0), T)
    assert (root["kind"], root["layer"]) == ("saturated_activation", "<input>")
    assert ev.extra["direction"] == "too_large"


def test_inputs_at_unit_scale_leave_the_layer_its_failure():
    f = _failure("activation_explosion", "fc1", 1, value=150.0)
    root, ev = find_root_cause([f], _facts(input_rms0=1.0), T)
    assert (root["kind"], root["layer"]) == ("activation_explosion", "fc1") and ev is None


# --- regression targets far above unit scale ------------------------------------


def test_targets_far_above_unit_scale_with_extreme_first_gradients_are_the_loss():
    f = _failure("activation_explosion", "fc2", 3, step=1, born=False, value=2e5)
    root, ev = find_root_cause([f], _facts(input_rms0=1.0, target_var=4e9, extreme_first=(1, 3)), T)
    assert (root["kind"], root["layer"], root["step"]) == ("exploding_gradient", "<loss>", 0)
    assert ev.extra["cause"] == "unscaled_targets" and math.isclose(ev.value, math.sqrt(4e9))


def test_targets_near_unit_scale_or_a_calm_first_step_are_not_blamed():
    f = _failure("activation_explosion", "fc2", 3, step=1, born=False, value=2e5)
    for facts in (_facts(input_rms0=1.0, target_var=4.0, extreme_first=(1, 3)),  # standardised targets
                  _facts(input_rms0=1.0, target_var=4e9, extreme_first=()),  # nothing extreme before updates
                  _facts(input_rms0=600.0, target_var=4e9, extreme_first=(1,))):  # the inputs come first
        root, _ = find_root_cause([f], facts, T)
        assert root["layer"] != "<loss>", facts


def test_unscaled_targets_do_not_explain_a_late_divergence():
    f = _failure("exploding_gradient", "fc2", 3, step=400, born=False, value=1e6)
    root, _ = find_root_cause([f], _facts(input_rms0=1.0, target_var=4e9, extreme_first=(3,)), T)
    assert root["layer"] == "fc2"


# --- exactly-zero gradients under an output pinned at +-1 -----------------------


def test_zero_gradients_under_a_pinned_output_are_saturation_and_raw_inputs_the_root():
    f = _failure("no_gradient", "fc1", 1, value=0.0, cause="zero_gradient", saturated_output=True)
    root, _ = find_root_cause([f], _facts(input_rms0=600.0), T)
    assert (root["kind"], root["layer"]) == ("saturated_activation", "<input>")
    root, _ = find_root_cause([f], _facts(input_rms0=1.0), T)
    assert (root["kind"], root["layer"]) == ("saturated_activation", "fc1")


def test_zero_gradients_without_a_pinned_output_stay_no_gradient():
    f = _failure("no_gradient", "fc1", 1, value=0.0, cause="zero_gradient")
    root, _ = find_root_cause([f], _facts(input_rms0=600.0), T)
    assert (root["kind"], root["layer"]) == ("no_gradient", "fc1")


def _gradient_aspect(types):
    layers = [{"name": f"m{i}", "type": t} for i, t in enumerate(types)]
    g = Gradient(T)
    g.grow(RowKinds(layers))
    return g


def _row(n, mean, std, absmax):
    row = np.full((n, len(METRIC)), np.nan)
    row[:, METRIC["act_mean"]], row[:, METRIC["act_std"]], row[:, METRIC["act_absmax"]] = mean, std, absmax
    return row


def test_pinned_is_a_tanh_like_output_at_its_bound_as_last_measured():
    g = _gradient_aspect(["RNN", "Tanh", "Linear", "GRU"])
    every = np.ones(4, bool)
    g._note_pinned(_row(4, [0.1, 0.0, 0.0, 0.2], [0.995, 0.999, 1.0, 0.5], [1.0, 1.0, 1.0, 1.0]), every)
    # (a Linear at +-1 is not bounded; a GRU at RMS 0.54 is not pinned)
    assert g.pinned.tolist() == [True, True, False, False]
    g._note_pinned(_row(4, np.nan, np.nan, np.nan), every)  # a step without activations keeps them
    assert g.pinned.tolist() == [True, True, False, False]
    g._note_pinned(_row(4, 0.0, 0.5, 1.0), every)
    assert not g.pinned.any()


# --- a value born after a parent's last watched submodule ------------------------


def _nan_input(layer, index, names):
    f = _failure("nonfinite", layer, index, value=21.0, side="forward", input_nonfinite=True)
    return find_root_cause([f], _facts(names=names, module_rows=tuple(range(1, len(names) - 2))), T)


def test_a_value_born_after_a_parents_last_submodule_is_that_parents():
    names = ("<input>", "gat1.lin", "gat1.a_src", "gat2.lin", "<loss>", "<optimizer>")
    root, ev = _nan_input("gat2.lin", 3, names)
    assert (root["kind"], root["layer"], root["step"]) == ("nonfinite", "gat1", 0)
    assert ev.extra["after"] == "gat1.a_src"


def test_a_value_born_inside_the_common_parent_stays_on_the_module_that_received_it():
    for names, layer in ((("<input>", "blk.q", "blk.out", "head", "<loss>", "<optimizer>"), "blk.out"),
                         (("<input>", "fc1", "fc2", "head", "<loss>", "<optimizer>"), "fc2")):
        root, _ = _nan_input(layer, 2, names)
        assert (root["kind"], root["layer"]) == ("nonfinite", layer)
