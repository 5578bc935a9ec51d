"""The demo: every scenario's planted cause is found, the healthy run is silent,
`neuraldbg demo` reports and serves, and the scenarios run as scripts.

The demo logdir is written once per module by ``demo_cli.run`` (the code
behind `neuraldbg demo --no-serve`); the per-scenario tests read it back with
the reader, as `neuraldbg report` does.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import urllib.request

import numpy as np
import pytest
import torch

from tb_neuraldbg import demo_cli
from tb_neuraldbg._demo import SCENARIOS, load
from tb_neuraldbg.reader import read_logdir
from tb_neuraldbg.format.contract import run_report

torch.set_num_threads(1)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """(logdir, exit code, stdout, stderr) of one `neuraldbg demo --no-serve`."""
    logdir = str(tmp_path_factory.mktemp("demo"))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = demo_cli.run(logdir, serve=False)
    return logdir, code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def reports(demo):
    logdir = demo[0]
    return {run.name: run_report(run.name, run.diagnosis, run.events) for run in read_logdir(logdir)}


@pytest.mark.slow
def test_demo_writes_one_run_per_scenario(demo, reports):
    logdir, code, out, err = demo
    assert code == 0, err
    assert sorted(reports) == sorted(SCENARIOS)
    for name in SCENARIOS:
        assert any(f.startswith("events.out.tfevents") for f in os.listdir(os.path.join(logdir, name)))
    # The progress lines (stderr, no terminal: one finished line per scenario).
    for i, name in enumerate(SCENARIOS, start=1):
        assert f"[{i}/{len(SCENARIOS)}] {name}" in err
    assert "\r" not in err
    # The report, the planted-versus-found table, the TensorBoard command.
    assert out.startswith("run ")
    assert "Planted versus found:" in out
    assert f"tensorboard --logdir {logdir}" in out


@pytest.mark.slow
@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_report_names_the_planted_cause(reports, name):
    scenario = load(name)
    report = reports[name]
    assert demo_cli.planted_cause_problems(scenario.EXPECTED, report) == [], json.dumps(
        report, indent=1
    )
    # A run with a root cause is failing, whatever the events' severities.
    assert report["status"] == ("healthy" if scenario.EXPECTED is None else "failing")


@pytest.mark.slow
def test_planted_versus_found_table_matches_the_reports(demo, reports):
    out = demo[2]
    table = out[out.index("Planted versus found:"):].splitlines()[1 : 1 + len(SCENARIOS)]
    for name, line in zip(SCENARIOS, table):
        problems = demo_cli.planted_cause_problems(load(name).EXPECTED, reports[name])
        assert line.split()[0] == name
        assert line.endswith(" ok") == (not problems), line


@pytest.mark.slow
def test_bad_batch_run_keeps_the_offending_batch(demo):
    from tb_neuraldbg._demo import bad_batch

    path = os.path.join(demo[0], "bad_batch", f"neuraldbg_batch_step{bad_batch.BAD_STEP}.npz")
    with np.load(path, allow_pickle=False) as saved:
        x = saved["arg0"]
    # Every 8th record of the 64 is NaN, as planted.
    assert x.shape == (64, 32)
    assert np.isnan(x).any(axis=1).tolist() == [i % 8 == 0 for i in range(64)]


def _report(cause=None, events=()):
    return {"run": "r", "status": "failing" if cause else "healthy", "root_cause": cause,
            "events": list(events)}


def _event(kind, layer, severity="error", step=3):
    return {"step": step, "layer": layer, "kind": kind, "from_state": "healthy",
            "to_state": kind, "value": 1.0, "severity": severity, "message": "m"}


@pytest.mark.parametrize(
    "expected, report, problems",
    [
        (None, _report(), 0),
        (None, _report(events=[_event("dead_activation", "relu", "info")]), 0),
        (None, _report(events=[_event("dead_activation", "relu", "warning")]), 1),
        (None, _report({"kind": "nonfinite", "layer": "fc", "step": 1, "message": ""}), 1),
        ({"kind": "nonfinite", "layer": "fc"}, _report(), 1),
        ({"kind": "nonfinite", "layer": "fc"},
         _report({"kind": "nonfinite", "layer": "fc", "step": 1, "message": ""}), 0),
        ({"kind": "nonfinite", "layer": "fc"},
         _report({"kind": "nonfinite", "layer": "relu", "step": 1, "message": ""}), 1),
        ({"kind": "nonfinite", "layer": "fc"},
         _report({"kind": "dead_activation", "layer": "fc", "step": 1, "message": ""}), 1),
        ({"kind": "nonfinite", "layer": "fc", "also": ["scaler_collapse"]},
         _report({"kind": "nonfinite", "layer": "fc", "step": 1, "message": ""}), 1),
        ({"kind": "nonfinite", "layer": "fc", "also": ["scaler_collapse"]},
         _report({"kind": "nonfinite", "layer": "fc", "step": 1, "message": ""},
                 [_event("scaler_collapse", "<optimizer>")]), 0),
    ],
)
def test_planted_cause_problems(expected, report, problems):
    assert len(demo_cli.planted_cause_problems(expected, report)) == problems


@pytest.mark.slow
def test_scenario_runs_as_a_script(tmp_path):
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "demo", "healthy.py"), "--logdir", str(tmp_path),
         "--steps", "3"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {tmp_path / 'healthy'}" in proc.stdout
    [run] = read_logdir(str(tmp_path))
    assert run.name == "healthy" and list(run.steps) == [0, 1, 2]


def test_rerun_replaces_the_previous_run(tmp_path):
    healthy = load("healthy")
    healthy.run(str(tmp_path), steps=4)
    healthy.run(str(tmp_path), steps=2)
    files = os.listdir(tmp_path / "healthy")
    assert len([f for f in files if f.startswith("events.out.tfevents")]) == 1
    [run] = read_logdir(str(tmp_path))
    assert list(run.steps) == [0, 1]


def test_a_foreign_directory_is_not_removed(tmp_path):
    (tmp_path / "healthy").mkdir()
    (tmp_path / "healthy" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        load("healthy").run(str(tmp_path), steps=1)
    assert (tmp_path / "healthy" / "notes.txt").read_text() == "mine"


def test_unknown_scenario_is_a_clear_error():
    with pytest.raises(ValueError, match="known: healthy"):
        load("nope")


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_redraws_in_place_on_a_terminal():
    stream = _Tty()
    bar = demo_cli._ProgressBar(stream, runs=2, name_width=7)
    bar.start(1, "healthy")
    for step in range(1, 101):
        bar.update(step, 100)
    bar.finish(100)
    text = stream.getvalue()
    # The empty bar, one redraw per cell that fills (not one per step), the
    # finished line.
    assert text.count("\r") == 1 + demo_cli._BAR_WIDTH + 1
    assert text.endswith("\n") and text.count("\n") == 1
    assert "[1/2] healthy [" + "#" * demo_cli._BAR_WIDTH + "] 100/100 steps in" in text


@pytest.mark.slow
def test_serve_prints_the_url_and_stops_cleanly_on_ctrl_c(demo):
    """A real process: the served TensorBoard lists the neuraldbg plugin, and
    SIGINT (Ctrl-C) stops it with exit 0 and a closing line."""
    code = "import sys; from tb_neuraldbg import demo_cli; sys.exit(demo_cli._serve(sys.argv[1], sys.stdout))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, demo[0]],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        line = ""
        while " at http" not in line:
            line = proc.stdout.readline()
            assert line, "the server exited before printing its URL"
        url = line.split(" at ", 1)[1].split("#", 1)[0]
        assert line.rstrip().endswith("#neuraldbg  (Ctrl-C stops it)")
        with urllib.request.urlopen(url + "data/plugins_listing", timeout=120) as resp:
            assert "neuraldbg" in json.load(resp)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert rest.rstrip().endswith("TensorBoard stopped.")


@pytest.mark.slow
def test_ctrl_c_received_by_another_thread_still_stops_the_wait():
    """The kernel may hand SIGINT to any of the server's threads; Python then
    raises KeyboardInterrupt only when the main thread next runs. The wait
    must wake up for it (one long sleep hung until the test's timeout)."""
    code = (
        "import signal, threading, time\n"
        "from tb_neuraldbg import demo_cli\n"
        "def poke():\n"
        "    time.sleep(0.3)\n"
        "    signal.pthread_kill(threading.get_ident(), signal.SIGINT)\n"
        "threading.Thread(target=poke).start()\n"
        "try:\n"
        "    demo_cli._wait_for_ctrl_c()\n"
        "except KeyboardInterrupt:\n"
        "    print('stopped')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "stopped"


def test_crashing_and_unsupported_scenarios_are_reported_and_the_others_still_run(tmp_path, monkeypatch, capsys):
    import types

    import tb_neuraldbg._demo as demo_pkg

    healthy = load("healthy")

    def crash(logdir, progress=None):
        progress(1, 5)
        raise RuntimeError("boom")

    fakes = {
        "short": types.SimpleNamespace(
            NAME="healthy", STEPS=3, EXPECTED=None,
            run=lambda logdir, progress=None: healthy.run(logdir, steps=3, progress=progress)),
        "crash": types.SimpleNamespace(NAME="crash", STEPS=5, EXPECTED=None, run=crash),
        "old": types.SimpleNamespace(NAME="old", STEPS=5, EXPECTED=None, run=crash,
                                     unsupported=lambda: "needs a newer torch"),
    }
    monkeypatch.setattr(demo_pkg, "SCENARIOS", ("crash", "old", "short"))
    monkeypatch.setattr(demo_pkg, "load", fakes.__getitem__)
    assert demo_cli.run(str(tmp_path), serve=False) == 1
    out, err = capsys.readouterr()
    assert "[1/3] crash" in err and "1/5 steps" in err and "FAILED: RuntimeError: boom" in err
    assert "[2/3] old" in err and "0/5 steps" in err and "skipped: needs a newer torch" in err
    assert "[3/3] healthy" in err and "3/3 steps" in err
    assert "crash        nothing (healthy)                    did not run" in out
    assert "old          nothing (healthy)                    skipped: needs a newer torch" in out
    assert "healthy      nothing (healthy)                    ok" in out
    # A skipped scenario alone is not a failure.
    monkeypatch.setattr(demo_pkg, "SCENARIOS", ("old", "short"))
    assert demo_cli.run(str(tmp_path), serve=False) == 0
