"""What the writer says early, in one line: a second live writer in the
run directory (and the reader, when two files interleave), an optimizer
that holds none of the model's parameters, a log_dir that is a file; and
stats_info's shares, fractions within [0, 1]."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings

import pytest
import torch
from torch import nn

from tb_neuraldbg import DebugWriter
from tb_neuraldbg.cli import main
from tb_neuraldbg.offline.reader import read_logdir
from tb_neuraldbg.training.hooks import step_facts
from tb_neuraldbg.training.worker import thread as worker_thread


def setup(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    return model, torch.optim.SGD(model.parameters(), lr=0.05), nn.CrossEntropyLoss()


def step(model, opt, crit):
    opt.zero_grad()
    crit(model(torch.randn(8, 4)), torch.randint(0, 3, (8,))).backward()
    opt.step()


# -- two writers in one run directory -----------------------------------------------------------


def test_a_second_live_writer_in_a_run_directory_is_warned(tmp_path):
    first = DebugWriter(str(tmp_path))
    with pytest.warns(RuntimeWarning, match=r"another DebugWriter \(pid \d+ on .+\) is writing into") as rec:
        second = DebugWriter(str(tmp_path))
    assert len([w for w in rec if "another DebugWriter" in str(w.message)]) == 1
    assert "\n" not in str(rec[0].message)  # one line
    second.close()
    first.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        DebugWriter(str(tmp_path)).close()  # one after the other: nothing to say


def test_the_reader_says_when_two_writers_wrote_one_run_at_once(tmp_path, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (the writers' own warning: above)
        a, b = DebugWriter(str(tmp_path)), DebugWriter(str(tmp_path))
    pa, pb = setup(0), setup(1)
    a.watch(pa[0], optimizer=pa[1], criterion=pa[2])
    b.watch(pb[0], optimizer=pb[1], criterion=pb[2])
    for _ in range(12):
        step(*pa)
        step(*pb)
        a.flush()
        b.flush()
    a.close()
    b.close()
    (run,) = read_logdir(str(tmp_path))
    said = [w for w in run.warnings if "two writers wrote this run at the same time" in w]
    assert len(said) == 1 and "own log_dir" in said[0]
    assert main(["report", str(tmp_path), "--json"]) == 0
    (rep,) = json.loads(capsys.readouterr().out)["runs"]
    assert any("two writers" in w for w in rep["warnings"])


def test_a_resumed_run_is_not_two_writers_at_once(tmp_path):
    for purge in (None, 3):
        with DebugWriter(str(tmp_path), purge_step=purge) as w:
            p = setup()
            w.watch(p[0], optimizer=p[1], criterion=p[2])
            for _ in range(5):
                step(*p)
        time.sleep(0.01)
    (run,) = read_logdir(str(tmp_path))
    assert run.warnings == [] and run.steps.tolist() == list(range(8))


# -- an optimizer of another model ---------------------------------------------------------------


def test_an_optimizer_holding_none_of_the_parameters_is_warned_at_watch(tmp_path):
    model, _, crit = setup()
    other = nn.Linear(4, 3)
    with DebugWriter(str(tmp_path)) as w:
        with pytest.warns(RuntimeWarning, match="optimizer holds none of the watched model's 4 trainable"):
            w.watch(model, optimizer=torch.optim.SGD(other.parameters(), lr=0.1), criterion=crit)
    with DebugWriter(str(tmp_path / "ok")) as w, warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        part = torch.optim.SGD(model[0].parameters(), lr=0.1)  # some of them: a legitimate choice
        w.watch(model, optimizer=part, criterion=crit)


# -- a log_dir that is a file --------------------------------------------------------------------


@pytest.mark.parametrize("below", ["", "run"])
def test_a_log_dir_that_is_a_file_is_one_value_error(tmp_path, below):
    path = tmp_path / "afile"
    path.write_text("not a directory")
    with pytest.raises(ValueError, match=r"is not a directory: .*afile is a file") as e:
        DebugWriter(str(path / below) if below else str(path))
    assert e.value.__cause__ is None and e.value.__context__ is None


def test_a_log_dir_that_is_a_file_ends_a_script_in_a_few_lines(tmp_path):
    path = tmp_path / "afile"
    path.write_text("x")
    proc = subprocess.run([sys.executable, "-c", f"from tb_neuraldbg import DebugWriter; DebugWriter({str(path)!r})"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("ValueError: log_dir") and len(lines) <= 6, proc.stderr


# -- stats_info's shares -------------------------------------------------------------------------


def test_the_shares_stay_within_0_and_1(tmp_path, monkeypatch):
    # The first step's hooks do one-time work (here a slow first commit), and
    # the worker takes more CPU a step than a step lasts: divided by the
    # median step, these read far above 1.
    commit = step_facts.StepFacts.commit
    first = []

    def slow_first_commit(self, *args):
        if not first:
            first.append(1)
            time.sleep(3.0)
        return commit(self, *args)

    monkeypatch.setattr(step_facts.StepFacts, "commit", slow_first_commit)
    process = worker_thread.Worker._process

    def busy_process(self, *args):
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.02:
            pass
        return process(self, *args)

    monkeypatch.setattr(worker_thread.Worker, "_process", busy_process)
    model, opt, crit = setup()
    with DebugWriter(str(tmp_path)) as w:
        w.watch(model, optimizer=opt, criterion=crit)
        for _ in range(3 * worker_thread.BURST):
            step(model, opt, crit)
        w.flush()
        info = w.stats_info
    assert info["hooks_ms_per_step"] > 3000 / (3 * worker_thread.BURST)  # the mean holds the first step
    assert 0 <= info["hooks_share"] <= 1 and 0 <= info["worker_share"] <= 1, info
