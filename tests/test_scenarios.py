"""Scenario suite: tiny models trained on CPU under the real DebugWriter.

Planted failures (tests/scenarios/failures.py, and the corpus of realistic
bugs in corpus_failures.py) must give the right root cause (kind, layer,
onset step within the case's tolerance: only where a statistic is sampled,
said in the case); healthy controls (healthy.py, corpus_healthy.py) must give
no warning and no error. The engine checked is the one the writer ran online;
one test also reads the events back from the event file. Each corpus case's
truth is measured too: on the raw statistics of the run and of the same run
without the bug, without the diagnosis.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import numpy as np
import pytest

from scenarios import (corpus_failures, corpus_healthy, corpus_loss_grad, corpus_scale, corpus_squash, failures, growth,
                       healthy)
from scenarios import corpus_absorbed, corpus_precision, corpus_prior, corpus_schedule, corpus_trivial
from scenarios import samples as corpus_samples
from scenarios.harness import read_events, train
from tb_neuraldbg.training.worker.thread import Worker

CASES = {c.spec.name: c for c in failures.all_cases() + corpus_failures.all_cases() + corpus_loss_grad.all_cases()
         + growth.all_cases() + corpus_scale.all_cases() + corpus_squash.all_cases()
         + corpus_precision.all_cases() + corpus_schedule.all_cases()
         + corpus_prior.all_cases() + corpus_samples.all_cases() + corpus_trivial.all_cases()}
HEALTHY = {s.name: s for s in healthy.all_specs() + corpus_healthy.all_specs() + corpus_loss_grad.all_specs()
           + growth.all_specs() + corpus_scale.all_specs() + corpus_squash.all_specs()
           + corpus_precision.all_specs() + corpus_schedule.all_specs()
           + corpus_prior.all_specs() + corpus_samples.all_specs() + corpus_trivial.all_specs()
           + corpus_absorbed.all_specs()}
TRUTHS = [name for name, c in CASES.items() if c.truth is not None]

pytestmark = pytest.mark.slow  # the scenario corpus: a training a case


@pytest.fixture(autouse=True)
def _quiet_writer_warnings():
    # error events log one warning line each; expected here
    logging.getLogger("tb_neuraldbg").setLevel(logging.ERROR)
    yield
    logging.getLogger("tb_neuraldbg").setLevel(logging.NOTSET)


@pytest.fixture(scope="module")
def scenario_run(tmp_path_factory):
    """train(spec) once per module: the root-cause test and the truth test
    of a case share its run."""
    cache = {}

    def get(spec):
        if spec.name not in cache:
            cache[spec.name] = train(spec, str(tmp_path_factory.mktemp(spec.name)))
        return cache[spec.name]

    return get


@pytest.mark.parametrize("name", list(CASES))
def test_planted_failure_gives_the_root_cause(name, scenario_run):
    case = CASES[name]
    result = scenario_run(case.spec)
    engine = result.replay(**case.replay) if case.replay else result.engine
    rc = engine.root_cause
    summary = [(e.step, e.layer, e.kind, e.severity) for e in engine.events][:12]
    assert rc is not None, f"no root cause; events: {summary}"
    assert rc["kind"] in case.kinds, (rc, summary)
    if case.layer == "*":
        assert not rc["layer"].startswith("<"), rc
    else:
        assert rc["layer"] == case.layer, (rc, summary)
    onset = case.onset if case.onset is not None else case.measure_onset(result)
    assert abs(rc["step"] - onset) <= case.tolerance, (rc, onset, summary)
    assert rc["message"] and "n/a" not in rc["message"], rc
    # every failure says what was measured: no "n/a" for a value it has
    for e in engine.events:
        if e.severity != "info":
            assert "n/a" not in e.message, e
    # the root cause is one of the events (the UI tags it in the timeline)
    assert (rc["kind"], rc["layer"], rc["step"]) in {(e.kind, e.layer, e.step) for e in engine.events}, rc
    # a planted failure makes the run failing, whatever its severity, unless
    # all it left is a warning that was resolved: a loss that started far from
    # ln K and then fell (DESIGN.md, Severity and status)
    resolved = rc["kind"] == "initial_loss" and not any(e.severity == "error" for e in engine.events)
    assert engine.status == "failing" or resolved, engine.status


@pytest.mark.parametrize("name", TRUTHS)
def test_planted_fault_is_real(name, scenario_run):
    """The fault is where the case says, measured without the diagnosis,
    against the same run without the bug."""
    case = CASES[name]
    case.truth(scenario_run(case.spec), scenario_run(case.fixed))


@pytest.mark.parametrize("name", ["amp_scaler_collapse", "contrastive_sqrt_under_gradscaler"])
def test_a_collapsed_gradscaler_is_reported_beside_its_origin(name, scenario_run):
    """DESIGN: the root is where the non-finite gradient is born; the
    collapse of the scale, its symptom, is an event too."""
    engine = scenario_run(CASES[name].spec).engine
    collapse = [e for e in engine.events if e.kind == "scaler_collapse"]
    assert collapse and collapse[0].layer == "<optimizer>"
    assert engine.root_cause["layer"] != "<optimizer>" and engine.root_cause["kind"] == "nonfinite"


def test_deep_sigmoid_vanishing_spreads_to_the_input(scenario_run):
    result = scenario_run(CASES["deep_sigmoid"].spec)
    vanishing = {e.layer for e in result.engine.events if e.kind == "vanishing_gradient"}
    # the first Linear and the root are vanishing, and so is everything between
    linears = [l["name"] for l in result.layers if l["type"] == "Linear"]
    root = result.engine.root_cause["layer"]
    assert linears[0] in vanishing and root in vanishing
    assert set(linears[: linears.index(root) + 1]) <= vanishing


@pytest.mark.parametrize("name", list(HEALTHY))
def test_healthy_control_is_silent(name, tmp_path):
    spec = HEALTHY[name]
    result = train(spec, str(tmp_path))
    loud = [e for e in result.events if e["severity"] != "info"]
    assert loud == [], loud
    assert result.engine.status == "healthy" and result.engine.root_cause is None
    # the loss fell: a control that learns nothing would not be a healthy one
    assert sum(result.losses[-20:]) < 0.8 * sum(result.losses[:20])
    # also with K known (the initial-loss check on)
    replay = result.replay(num_classes=spec.num_classes)
    assert [e for e in replay.events if e.severity != "info"] == []


def test_a_clipped_burst_is_told_as_info(tmp_path):
    """Pre-clip norms that burst while nothing fails: healthy, and the user
    is told that the clip does its job."""
    result = train(HEALTHY["rnn_clipped_bursts"], str(tmp_path))
    notes = [e for e in result.engine.events if e.severity == "info" and e.kind == "exploding_gradient"]
    assert notes and "clip" in notes[0].message and result.engine.status == "healthy"


def test_events_and_diagnosis_reach_the_event_file(tmp_path):
    result = train(CASES["forward_nan"].spec, str(tmp_path))
    events, diagnosis = read_events(str(tmp_path))
    # the writer may add keys of its own (e.g. the saved batch's file name)
    assert [{k: e[k] for k in mine} for e, mine in zip(events, result.events)] == result.events
    assert len(events) == len(result.events)
    assert diagnosis == {"status": result.engine.status, "root_cause": result.engine.root_cause}
    assert diagnosis["status"] == "failing" and diagnosis["root_cause"]["layer"] == "3"


# Every scenario where a non-finite value appears (forward, backward, in the
# loss, in the batch, under a GradScaler, after an explosion).
NONFINITE = [
    "forward_nan", "backward_inf", "backward_inf_parameterless", "amp_scaler_collapse", "bad_batch_nan",
    "log_zero_in_loss", "nan_regression_target", "attention_all_masked", "lr_jump_explosion",
    "rnn_large_recurrent_init", "large_init_everywhere", "unnormalised_x1000_relu", "lr_growing_schedule",
]


def _shape(result):
    rc = result.engine.root_cause
    events = [
        (e["step"], e["layer"], e["kind"], e["from_state"], e["to_state"], e["severity"],
         {k: e.get(k) for k in ("side", "from_layer", "input_nonfinite", "bwd_origin", "via", "received")})
        for e in result.events
    ]
    return (rc and (rc["kind"], rc["layer"], rc["step"])), events


@pytest.mark.parametrize("name", NONFINITE)
def test_replay_finds_the_origins_the_every_step_flags_find(name, tmp_path):
    """The default (re-run a step with a non-finite value, before its update)
    and the every-step flags give the same root cause and the same events,
    origin details included (side, from which layer, born in backward)."""
    spec = CASES[name].spec
    got = {}
    for mode in ("every_step", "replay"):
        s = dataclasses.replace(spec, watch=dict(spec.watch, nonfinite=mode))
        result = train(s, str(tmp_path / mode))
        got[mode] = _shape(result)
        if mode == "replay":
            assert result.instrument.replays > 0 and result.instrument.mode == "replay"
    assert got["replay"] == got["every_step"]


@pytest.mark.parametrize("name", ["forward_nan", "lr_jump_explosion"])
@pytest.mark.parametrize("mode", ["replay", "every_step"])
def test_the_same_run_gives_the_same_events_whatever_the_worker_lag(name, mode, tmp_path, monkeypatch):
    """What is measured is decided on the training thread from each step's
    own values: a worker that lags far behind changes no event and no row."""
    spec = dataclasses.replace(CASES[name].spec, watch=dict(CASES[name].spec.watch, nonfinite=mode))
    fast = train(spec, str(tmp_path / "fast"))
    process = Worker._process

    def slow(self, packet, *assembled):
        time.sleep(0.004)
        return process(self, packet, *assembled)

    monkeypatch.setattr(Worker, "_process", slow)
    lagging = train(spec, str(tmp_path / "slow"))
    assert lagging.events == fast.events
    assert [s for s, _ in lagging.rows] == [s for s, _ in fast.rows]
    assert all(np.array_equal(a, b, equal_nan=True) for (_, a), (_, b) in zip(lagging.rows, fast.rows))
