"""The messages as a user reads them (the tab's root-cause card shows
"What to try:" and then the root cause's message; the report prints each
event's message under its value): advice after "What to try:", one text per
kind at <optimizer>, numbers that say what they are, no clipping advised to
a run that clips, and a run named by its directory."""

from __future__ import annotations

import json

from tb_neuraldbg import cli, metadata
from tb_neuraldbg.diagnosis import Engine
from tb_neuraldbg.diagnosis import explain
from tb_neuraldbg.diagnosis.explain import CAUSES, advice, event_message
from tb_neuraldbg.offline.text_report import format_report
from tests.test_diagnosis import Run, feed

M = metadata.METRIC_INDEX


def _exploding_after_lr_jump(eng, run):
    def plant(s, r):
        if s >= 98:
            r[-1, M["value"]] = 1.0  # lr x100
        if s >= 99:
            r[run.i("<loss>"), M["value"]] = 50.0 * (s - 97)  # the loss shows it first
        if s >= 100:
            r[run.params, M["grad_norm"]] *= 10.0 ** min(6, s - 99)

    feed(eng, run, range(110), plant)


def test_what_to_try_is_followed_by_advice():
    run = Run()
    eng = Engine(run.layers)
    _exploding_after_lr_jump(eng, run)
    msg = eng.root_cause["message"]
    # the tab prints "What to try: " + this: it must start with advice
    assert not msg.startswith("<optimizer>") and msg.startswith("A lower learning rate"), msg
    assert "Seen: <optimizer>" in msg


def test_a_nonfinite_cause_gets_advice():
    for extra in ({}, {"side": "backward"}, {"side": "backward", "in_loss": True}, {"side": "loss"}):
        text = advice("nonfinite", "Linear", extra)
        assert "Try:" in text, extra
    assert "detect_anomaly" in advice("nonfinite", "Linear", {}) and "autocast" in advice("nonfinite", "Linear", {})
    msg = event_message("nonfinite", "fc1", "Linear", "healthy", "nonfinite", 7, None, None, {})
    assert "Try:" in msg
    # every row of the advice table says what to try
    assert all("Try:" in t for t in list(explain.BY_CAUSE.values()) + list(CAUSES.values()))


def test_each_kind_at_the_optimizer_has_its_own_text():
    run = Run()
    eng = Engine(run.layers)
    _exploding_after_lr_jump(eng, run)
    opt = [e for e in eng.events if e.layer == "<optimizer>"]
    kinds = {e.kind for e in opt}
    assert {"loss_spike", "exploding_gradient"} <= kinds, [(e.kind, e.message) for e in opt]
    texts = {e.kind: e.message for e in opt}
    assert texts["loss_spike"] != texts["exploding_gradient"]
    assert "the loss jumps" in texts["loss_spike"] and "gradients explode" in texts["exploding_gradient"]


def test_numbers_say_what_they_are():
    m = event_message("data_anomaly", "<input>", "input", "healthy", "anomalous", 5, 38.0, 3.0, {})
    assert "batch max |x| 38" in m and "12.7x" in m
    m = event_message("loss_plateau", "<loss>", "loss", "healthy", "plateau", 5, 2.3, 2.31, {})
    assert "(loss 2.31 -> 2.3)" in m
    m = event_message("scaler_collapse", "<optimizer>", "optimizer", "healthy", "collapsed", 5, 1.0, 65536.0, {})
    assert "(scale 6.55e+04 -> 1" in m
    report = {"runs": [{"run": "r", "status": "failing", "root_cause": None, "events": [
        {"step": 3, "layer": "<input>", "kind": "data_anomaly", "from_state": "healthy",
         "to_state": "anomalous", "value": 3.8, "severity": "warning", "message": "m"},
        {"step": 4, "layer": "fc1", "kind": "exploding_gradient", "from_state": "healthy",
         "to_state": "exploding", "value": 400.0, "severity": "error", "message": "m"}]}]}
    text = format_report(report, width=120)
    assert "value 3.8" not in text and "batch max |x| 3.8" in text
    assert f"{metadata.METRIC_INFO['grad_norm'].label} 400" in text


def test_a_run_that_clips_is_not_told_to_clip():
    text = advice("exploding_gradient", "Linear", {}, clips=True)
    assert "clip_grad_norm_" not in text and "learning rate" in text and "already clips" in text
    # not known: today's advice
    assert "clip_grad_norm_" in advice("exploding_gradient", "Linear", {})
    assert "clip_grad_norm_" in advice("exploding_gradient", "Linear", {}, clips=False)
    run = Run()
    eng = Engine(run.layers)
    eng.grad_clip = 1.0  # HF Trainer's default max_grad_norm
    _exploding_after_lr_jump(eng, run)
    assert all("clip_grad_norm_" not in e.message for e in eng.events), [e.message for e in eng.events]
    assert "clip_grad_norm_" not in eng.root_cause["message"]


def test_a_run_dir_is_named_by_its_directory(tmp_path, capsys):
    from tests.synthetic import write_run

    write_run(tmp_path, "exp1", num_steps=3)
    assert cli.main(["report", str(tmp_path / "exp1")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("run exp1") and "run ." not in out
    assert cli.main(["report", str(tmp_path / "exp1"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["run"] == "."
