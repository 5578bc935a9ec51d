"""A run resumed with DebugWriter(logdir, purge_step=N): watch() counts from
N, and what the earlier writer wrote from step N on is hidden, so the report
and the plugin read one run with continuous steps, a failure after the
resume at its real step; a run whose writer never closed reads incomplete."""

from __future__ import annotations

import json
import os
import signal
import warnings

import pytest
from tb_neuraldbg import DebugWriter
from tb_neuraldbg.cli import main
from tb_neuraldbg.offline.reader import read_logdir
from tests.test_plugin_wsgi import BASE, App
from tests.test_signals import NAN_AT, start, stop, train


def inputs(events) -> list:
    """The steps where the batch went bad (not where it recovered)."""
    return sorted({e["step"] for e in events if e["layer"] == "<input>" and e["to_state"] != "healthy"})


@pytest.fixture
def resumed(tmp_path):
    """The first writer: steps 0-59, a NaN batch at 50; resumed from step 40:
    steps 40-79, a NaN batch at 70."""
    with DebugWriter(str(tmp_path)) as first:
        train(first, 60, nan_at=50)
    with DebugWriter(str(tmp_path), purge_step=40) as again:
        train(again, 40, nan_at=30, seed=1)
        assert again._handle.instrument.step == 80  # counted on from the purge step
    return tmp_path


def test_the_report_reads_a_resumed_run_as_one(resumed, capsys):
    (run,) = read_logdir(str(resumed))
    assert run.steps.tolist() == list(range(80))
    assert inputs(run.events) == [70]  # the first writer's step 50 is hidden
    assert run.complete is True and not run.incomplete
    assert main(["report", str(resumed), "--json"]) == 0
    (rep,) = json.loads(capsys.readouterr().out)["runs"]
    assert rep["status"] == "failing" and rep["root_cause"]["step"] == 70
    assert inputs(rep["events"]) == [70] and not any(40 <= e["step"] < 70 and e["layer"] == "<input>"
                                                     for e in rep["events"])
    assert "incomplete" not in rep and "complete" not in rep


def test_the_plugin_reads_a_resumed_run_as_one(resumed):
    # TensorBoard's Python loader keeps what the purge hides (the first
    # writer logged no SessionLog.START): the plugin drops it itself.
    app = App(resumed)
    (run,) = app.json(f"{BASE}/runs")["runs"]
    assert (run["first_step"], run["last_step"], run["num_steps"]) == (0, 79, 80)
    assert run["root_cause"]["step"] == 70 and run["complete"] is True
    events = app.json(f"{BASE}/events?run=.")["events"]
    assert inputs(events) == [70]
    heat = app.json(f"{BASE}/heatmap?run=.&metric=grad_norm&max_cols=5000")
    assert heat["col_start"] == list(range(80))
    layer = app.json(f"{BASE}/layer?run=.&layer=%3Cinput%3E")
    assert layer["steps"] == list(range(80))
    (rep,) = app.json(f"{BASE}/report")["runs"]
    assert rep["root_cause"]["step"] == 70 and "complete" not in rep


def test_start_step_given_wins_over_the_purge_step(tmp_path):
    with DebugWriter(str(tmp_path), purge_step=40) as w:
        train(w, 3, start_step=45)
    (run,) = read_logdir(str(tmp_path))
    assert run.steps.tolist() == [45, 46, 47]


def test_a_killed_run_resumed_reads_closed_and_whole(tmp_path, capsys):
    proc = start(tmp_path, "thread", "flush")
    stop(proc, signal.SIGKILL)
    (killed,) = read_logdir(str(tmp_path))
    assert killed.complete is False and NAN_AT in inputs(killed.events)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # (the killed writer's lock went with it)
        again = DebugWriter(str(tmp_path), purge_step=10)
    with again:
        train(again, 20)
    (run,) = read_logdir(str(tmp_path))
    assert run.complete is True and not run.incomplete
    assert run.steps.tolist() == list(range(30)) and inputs(run.events) == []
    app = App(tmp_path)
    (listed,) = app.json(f"{BASE}/runs")["runs"]
    assert listed["complete"] is True and listed["status"] == "healthy"


def test_the_plugin_says_a_killed_run_is_incomplete(tmp_path):
    proc = start(tmp_path, "thread", "flush")
    stop(proc, signal.SIGKILL)
    (read,) = read_logdir(str(tmp_path))
    app = App(tmp_path)
    (run,) = app.json(f"{BASE}/runs")["runs"]
    assert run["complete"] is False and run["incomplete"] is True and run["last_step"] == read.last_step
    assert any("did not close" in w for w in run["warnings"])
    (rep,) = app.json(f"{BASE}/report")["runs"]
    assert rep["complete"] is False and rep["last_step"] == read.last_step


def test_a_closed_run_is_served_complete(tmp_path):
    with DebugWriter(str(tmp_path)) as w:
        train(w, 5)
    (run,) = App(tmp_path).json(f"{BASE}/runs")["runs"]
    assert run["complete"] is True and "incomplete" not in run
    assert os.path.exists(tmp_path / ".neuraldbg.lock")  # (the lock file stays; its lock does not)
