"""benchmarks/engine_replay.py: the rows it records replay into the same
diagnosis, and its digest changes when the engine says anything else."""

from __future__ import annotations

import logging
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import engine_replay  # noqa: E402
from tb_neuraldbg.diagnosis.aspects import gradient  # noqa: E402

RUNS = ["logits_x50", "conv_dead_bias"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("rows"))
    engine_replay.record(folder, RUNS)
    return folder


def _digest(folder, capsys) -> list[str]:
    engine_replay.digest(folder)
    return capsys.readouterr().out.splitlines()


def test_the_recorded_rows_replay_into_the_online_diagnosis(recorded, capsys):
    capsys.readouterr()  # (record's progress lines)
    runs = list(engine_replay._runs(recorded))
    assert sorted(r[0] for r in runs) == sorted(RUNS)
    lines = _digest(recorded, capsys)
    assert lines == _digest(recorded, capsys)  # the same rows, the same digest
    for name, layers, k, steps, rows in runs:
        eng, _ = engine_replay._replay(layers, k, steps, rows)
        assert eng.events, name  # each run holds a planted failure
        assert all(r.dtype == np.float32 and r.shape[0] <= len(layers) for r in rows)
        (line,) = [l for l in lines if l.startswith(name + " ")]
        assert f" {len(steps)} steps " in line


def test_the_digest_changes_when_the_diagnosis_does(recorded, capsys, monkeypatch):
    capsys.readouterr()
    before = _digest(recorded, capsys)
    classify = gradient.Gradient.classify

    def one_more_failure(self, *args, **kwargs):
        out = classify(self, *args, **kwargs)
        raw = out["grad"][0]
        raw[self.kinds.is_mod.argmax()] = gradient.STATE["nonfinite"]  # the first module, always
        return out

    monkeypatch.setattr(gradient.Gradient, "classify", one_more_failure)
    after = _digest(recorded, capsys)
    assert len(after) == len(before)
    assert all(a != b for a, b in zip(after, before))


def test_recording_leaves_the_process_logging(recorded):
    assert logging.root.manager.disable == logging.NOTSET  # (later tests read log records)


def test_a_folder_without_rows_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="no recorded run"):
        list(engine_replay._runs(str(tmp_path)))
