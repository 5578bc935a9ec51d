"""The ``neuraldbg`` command line: exit codes, bad input, --rediagnose, demo wiring."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from tb_neuraldbg import cli, metadata
from tb_neuraldbg.offline import rediagnose as offline
from tb_neuraldbg.diagnosis.events import Event
from tests.synthetic import event, write_run


@pytest.fixture
def logdirs(tmp_path):
    """Three logdirs: healthy, warnings only, failing."""
    healthy = tmp_path / "healthy"
    write_run(healthy, "run", num_steps=5)
    warn = tmp_path / "warn"
    write_run(warn, "run", num_steps=5, events=[event(2, "fc1", "dead_activation", value=0.9)])
    failing = tmp_path / "failing"
    write_run(failing, "ok", num_steps=5)
    write_run(failing, "bad", num_steps=5, events=[event(1, "fc0", "nonfinite")])
    return {"healthy": healthy, "warn": warn, "failing": failing}


@pytest.mark.parametrize(
    "which, fail_on, expected",
    [
        ("healthy", None, 0), ("warn", None, 0), ("failing", None, 0),
        ("healthy", "error", 0), ("warn", "error", 1), ("failing", "error", 1),
        ("healthy", "warning", 0), ("warn", "warning", 1), ("failing", "warning", 1),
    ],
)
@pytest.mark.parametrize("as_json", [False, True])
def test_exit_codes(logdirs, capsys, which, fail_on, expected, as_json):
    argv = ["report", str(logdirs[which])]
    argv += ["--fail-on", fail_on] if fail_on else []
    argv += ["--json"] if as_json else []
    assert cli.main(argv) == expected
    out = capsys.readouterr().out
    if as_json:
        assert isinstance(json.loads(out)["runs"], list)
    else:
        assert out.startswith("run ")


@pytest.mark.parametrize("kind", ["missing", "empty", "file", "not_neuraldbg"])
def test_bad_logdir_is_exit_2_with_a_message(tmp_path, capsys, kind):
    path = tmp_path / "x"
    if kind == "empty":
        path.mkdir()
    elif kind == "file":
        path.write_text("hello")
    elif kind == "not_neuraldbg":
        path.mkdir()
        (path / "events.out.tfevents.0.host").write_bytes(b"")
    assert cli.main(["report", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("neuraldbg: error: ")
    assert str(path) in captured.err and "Traceback" not in captured.err


def test_bad_arguments_exit_2(logdirs, capsys):
    for argv in (["report"], ["report", str(logdirs["healthy"]), "--fail-on", "info"], [],
                 ["report", str(logdirs["healthy"]), "--width", "10"]):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 2, argv
    capsys.readouterr()


def test_data_warnings_go_to_stderr_without_traceback(tmp_path, capsys):
    write_run(tmp_path, "r", num_steps=3, events=[{"step": 2, "layer": "fc0"}])
    assert cli.main(["report", str(tmp_path), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["runs"][0]["events"] == []
    assert captured.err.startswith("neuraldbg: warning: run 'r': skipped an event")


class _RecordingEngine:
    """Stands in for diagnosis.Engine: records what the replay feeds it."""

    instances: list = []

    def __init__(self, layers, thresholds=None, num_classes=None):
        self.layers = [dict(l) for l in layers]
        self.thresholds = thresholds
        self.num_classes = num_classes
        self.calls = []  # (step, row, number of layers then)
        self.grown_at = []
        self.events = []
        self.root_cause = None
        self.states = np.zeros(len(self.layers), np.uint8)
        _RecordingEngine.instances.append(self)

    @property
    def status(self):
        return "failing" if any(e.severity == "error" for e in self.events) else "healthy"

    def add_layers(self, new):
        self.grown_at.append((self.calls[-1][0] if self.calls else None, [l["name"] for l in new]))
        self.layers += [dict(l) for l in new]
        self.states = np.zeros(len(self.layers), np.uint8)

    def update(self, step, row):
        assert row.shape == (len(self.layers), len(metadata.METRICS))
        self.calls.append((step, np.array(row), len(self.layers)))
        self.states = np.full(len(self.layers), step % 3, np.uint8)
        if step == 4:
            e = Event(4, self.layers[1]["name"], "exploding_gradient", "healthy", "exploding",
                      float(row[1, 0]), "error", "grew", {"value_before": 0.5})
            self.events.append(e)
            self.root_cause = {"kind": e.kind, "layer": e.layer, "step": 4, "message": "grew"}
            return [e]
        return []

    def finish(self):
        e = Event(2, "<loss>", "loss_plateau", "healthy", "loss_plateau", None, "warning", "flat")
        self.events.append(e)
        return [e]


def test_rediagnose_replays_the_stored_rows(tmp_path, capsys, monkeypatch):
    _RecordingEngine.instances = []
    monkeypatch.setattr(offline, "Engine", _RecordingEngine)
    truth = write_run(tmp_path, "r", num_modules=2, num_steps=8,
                      grow={5: [{"name": "head", "type": "Linear"}]},
                      config={"num_classes": 10})
    assert cli.main(["report", str(tmp_path), "--json", "--rediagnose", "--fail-on", "error"]) == 1
    (engine,) = _RecordingEngine.instances
    assert [c[0] for c in engine.calls] == list(truth.steps)
    assert engine.grown_at == [(4, ["head"])]  # grown before step 5's row
    for (step, row, n), k in zip(engine.calls, range(len(truth.steps))):
        np.testing.assert_array_equal(row, truth.stats[k, :n])
    assert engine.num_classes == 10
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["status"] == "failing"
    assert run["root_cause"]["layer"] == "fc0" and run["root_cause"]["step"] == 4
    # Sorted by onset: finish()'s event (step 2) first; extras dropped.
    assert [(e["step"], e["kind"]) for e in run["events"]] == [(2, "loss_plateau"), (4, "exploding_gradient")]

    # The Python face: diagnose() gives the engine's states per stored step.
    (d,) = offline.diagnose(tmp_path)
    assert d.run == "r" and d.states.shape == truth.states.shape
    assert list(d.states[:, 0]) == [s % 3 for s in truth.steps]
    assert (d.states[:5, -1] == metadata.STATE_UNKNOWN).all()


def test_diagnose_is_public():
    import tb_neuraldbg

    assert tb_neuraldbg.diagnose is offline.diagnose


def test_demo_calls_demo_cli(monkeypatch):
    calls = []
    fake = types.ModuleType("tb_neuraldbg.demo_cli")
    fake.run = lambda logdir, serve: calls.append((logdir, serve)) or 0
    monkeypatch.setitem(sys.modules, "tb_neuraldbg.demo_cli", fake)
    import tb_neuraldbg

    monkeypatch.setattr(tb_neuraldbg, "demo_cli", fake, raising=False)
    assert cli.main(["demo", "--logdir", "/tmp/d", "--no-serve"]) == 0
    assert cli.main(["demo"]) == 0
    assert calls == [("/tmp/d", False), (None, True)]


@pytest.mark.slow
def test_console_script_is_installed(logdirs):
    """The `neuraldbg` entry point (setup.py) runs main() and returns its code."""
    script = os.path.join(os.path.dirname(sys.executable), "neuraldbg")
    assert os.path.exists(script), "pip install -e . installs the console script"
    proc = subprocess.run(
        [script, "report", str(logdirs["failing"]), "--fail-on", "error"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "run bad" in proc.stdout and "FAILING" in proc.stdout


def test_rediagnose_notes_steps_that_were_not_stored(tmp_path, capsys):
    write_run(tmp_path, "strided", num_steps=5, stride=10)
    write_run(tmp_path, "dense", num_steps=5)
    assert cli.main(["report", str(tmp_path), "--rediagnose"]) == 0
    err = capsys.readouterr().err
    assert "run 'strided' stores statistics for 5 of its 41 steps" in err
    assert "dense" not in err


def test_all_lists_every_event(tmp_path, capsys):
    events = [event(2, "<input>", "data_anomaly")]  # the root cause: alone
    events += [event(4, f"fc{i}", "nonfinite", message=f"m{i}") for i in range(3)]
    write_run(tmp_path, "r", num_steps=6, events=events)
    assert cli.main(["report", str(tmp_path)]) == 0
    compact = capsys.readouterr().out
    assert "m0" in compact and "m1" not in compact and "+2 similar" in compact
    assert cli.main(["report", str(tmp_path), "--all"]) == 0
    full = capsys.readouterr().out
    assert all(f"m{i}" in full for i in range(3)) and "similar" not in full


@pytest.mark.slow
def test_report_never_imports_torch(logdirs):
    """The report (and its offline re-diagnosis) must run where torch is not installed."""
    code = (
        "import sys; from tb_neuraldbg import cli; "
        f"rc = cli.main(['report', {str(logdirs['failing'])!r}, '--json', '--rediagnose']); "
        "assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
