"""SIGTERM and SIGINT while a DebugWriter watches: the steps it holds are
written within its drain_timeout, then the signal does what it would have
done (the user's handler chained, else the default: the exit status is the
signal's); a Ctrl-C does not kill the worker process of analysis="process";
handlers of several writers chain and are put back at close()."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
from torch import nn

from tb_neuraldbg import DebugWriter
from tb_neuraldbg.cli import main
from tb_neuraldbg.offline.reader import read_logdir
from tb_neuraldbg.training.run import signals
from tb_neuraldbg.training.worker import thread as worker_thread

pytestmark = [pytest.mark.slow,  # (real child trainers)
              pytest.mark.skipif(os.name != "posix", reason="POSIX signals")]

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "signal_child.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAN_AT, READY_AT = 19, 21
# A hang guard, not a duration to meet: a child that honours its drain bound
# ends long before (test_a_drain_that_cannot_finish_ends_at_its_bound).
HANG_GUARD_S = 60.0


def start(logdir, analysis="thread", *options, group=False) -> subprocess.Popen:
    """The child trainer (tests/signal_child.py), once it printed "ready"."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, CHILD, str(logdir), analysis, str(NAN_AT), str(READY_AT), *options],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=group)
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise AssertionError(f"the child did not start: {line!r} {proc.stderr.read()[-3000:]}")
    return proc


def stop(proc, signum, group=False) -> tuple[float, str, str]:
    """Send ``signum`` (to the child's whole process group, as a terminal's
    Ctrl-C does, with ``group``); (seconds until it ended, stdout, stderr)."""
    t0 = time.monotonic()
    if group:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"the child did not end: {err[-3000:]}")
    return time.monotonic() - t0, out, err


def report(logdir, capsys) -> dict:
    capsys.readouterr()
    assert main(["report", str(logdir), "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    return run


def assert_the_tail_is_there(run):
    """The NaN batch a few steps before the signal was analysed and written,
    and the run reads closed (no "incomplete", no "complete": false)."""
    assert any(e["step"] == NAN_AT and e["layer"] == "<input>" for e in run["events"]), run
    assert run["root_cause"] is not None and run["root_cause"]["step"] == NAN_AT
    assert "incomplete" not in run and "complete" not in run, run


@pytest.mark.parametrize("analysis", ["thread", "process"])
def test_sigterm_writes_the_held_steps_then_ends_with_the_signal(tmp_path, capsys, analysis):
    proc = start(tmp_path, analysis)
    _, _, err = stop(proc, signal.SIGTERM)
    assert proc.returncode == -signal.SIGTERM, err[-3000:]
    assert_the_tail_is_there(report(tmp_path, capsys))
    (run,) = read_logdir(str(tmp_path))
    assert run.complete is True and run.last_step == READY_AT  # the ring was written too


@pytest.mark.parametrize("analysis", ["thread", "process"])
def test_sigint_drains_then_raises_keyboard_interrupt(tmp_path, capsys, analysis):
    proc = start(tmp_path, analysis)
    _, _, err = stop(proc, signal.SIGINT)
    # Python's own SIGINT handler ran: KeyboardInterrupt, and the exit by SIGINT.
    assert "KeyboardInterrupt" in err and proc.returncode == -signal.SIGINT, err[-3000:]
    assert_the_tail_is_there(report(tmp_path, capsys))


@pytest.mark.parametrize("analysis", ["thread"])
def test_a_drain_that_cannot_finish_ends_at_its_bound(tmp_path, analysis):
    """The writer's worker blocks for good: SIGTERM waits drain_timeout (1 s
    here) for it, no longer, then ends the process with the signal's status
    (without the bound, the child would still be waiting at the hang guard)."""
    proc = start(tmp_path, analysis, "stuck")
    _, _, err = stop(proc, signal.SIGTERM)
    assert proc.returncode == -signal.SIGTERM, err[-3000:]


def test_ctrl_c_to_the_process_group_does_not_kill_the_worker_process(tmp_path, capsys):
    # The trainer leads its own process group, as a shell's foreground job
    # does; Ctrl-C sends SIGINT to the whole group.
    proc = start(tmp_path, "process", group=True)
    _, _, err = stop(proc, signal.SIGINT, group=True)
    assert proc.returncode == -signal.SIGINT, err[-3000:]
    assert "worker process ended" not in err, err[-3000:]  # it was not killed by the Ctrl-C
    assert_the_tail_is_there(report(tmp_path, capsys))


def test_the_users_sigterm_handler_is_chained_not_replaced(tmp_path, capsys):
    proc = start(tmp_path, "thread", "user-handler")
    _, out, err = stop(proc, signal.SIGTERM)
    assert out.count("user handler") == 1 and proc.returncode == 3, (out, err[-3000:])
    assert_the_tail_is_there(report(tmp_path, capsys))


def test_a_killed_run_reads_incomplete_with_its_last_step(tmp_path, capsys):
    proc = start(tmp_path, "thread", "flush")
    stop(proc, signal.SIGKILL)
    run = report(tmp_path, capsys)
    (read,) = read_logdir(str(tmp_path))
    assert read.complete is False and read.incomplete
    assert run["complete"] is False and run["incomplete"] is True
    assert run["last_step"] == read.last_step is not None
    assert any("did not close" in w and f"step {read.last_step}" in w for w in run["warnings"])
    capsys.readouterr()
    assert main(["report", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "incomplete" in text and "did not close" in text


# -- in this process: what is installed, and when -----------------------------------------------


def train(writer, steps, nan_at=None, seed=0, **watch):
    """Watch a fresh small model (as if loaded from a checkpoint) and train
    it ``steps`` steps; a NaN batch at loop index ``nan_at``."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    crit = nn.CrossEntropyLoss()
    writer.watch(model, optimizer=opt, criterion=crit, **watch)
    for i in range(steps):
        x = torch.randn(16, 4)
        if i == nan_at:
            x[0, 0] = float("nan")
        opt.zero_grad()
        crit(model(x), torch.randint(0, 3, (16,))).backward()
        opt.step()


@pytest.fixture
def handlers():
    """SIGTERM and SIGINT as they were, put back after the test."""
    saved = {s: signal.getsignal(s) for s in signals.SIGNALS}
    yield saved
    for s, h in saved.items():
        signal.signal(s, h)


def test_several_writers_chain_to_the_users_handler_and_put_it_back(tmp_path, monkeypatch, handlers):
    monkeypatch.setattr(worker_thread, "BURST_WAIT_S", 600.0)  # only the drain analyses the last steps
    calls = []
    mine = lambda signum, frame: calls.append(signum)  # noqa: E731
    signal.signal(signal.SIGTERM, mine)
    a, b = DebugWriter(str(tmp_path / "a")), DebugWriter(str(tmp_path / "b"))
    train(a, 12, nan_at=10)
    train(b, 12, nan_at=11)
    assert signal.getsignal(signal.SIGTERM) is not mine
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.2)  # (the handler runs in this thread at the next instruction)
    assert calls == [signal.SIGTERM]  # the user's handler, once
    # Both writers were drained: their last steps and events are on disk while they are open.
    runs = {r.name: r for r in read_logdir(str(tmp_path))}
    assert [e["step"] for e in runs["a"].events if e["layer"] == "<input>"] == [10]
    assert [e["step"] for e in runs["b"].events if e["layer"] == "<input>"] == [11]
    assert runs["a"].last_step == runs["b"].last_step == 11
    a.close()
    assert signal.getsignal(signal.SIGTERM) is not mine  # b still watches
    b.close()
    assert signal.getsignal(signal.SIGTERM) is mine
    assert signal.getsignal(signal.SIGINT) is handlers[signal.SIGINT]
    assert {r.name: r.complete for r in read_logdir(str(tmp_path))} == {"a": True, "b": True}


def test_writers_closed_out_of_order_put_back_what_was_there(tmp_path, handlers):
    before = signal.getsignal(signal.SIGTERM)
    a, b = DebugWriter(str(tmp_path / "a")), DebugWriter(str(tmp_path / "b"))
    train(a, 2)
    train(b, 2)
    b.close()
    assert signal.getsignal(signal.SIGTERM) is not before
    a.close()
    assert signal.getsignal(signal.SIGTERM) is before


def test_nothing_is_installed_off_the_main_thread_nor_over_an_ignored_signal(tmp_path, handlers):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    before = signal.getsignal(signal.SIGTERM)
    w = DebugWriter(str(tmp_path / "t"))
    t = threading.Thread(target=train, args=(w, 2))
    t.start()
    t.join()
    assert signal.getsignal(signal.SIGTERM) is before
    w.close()
    w2 = DebugWriter(str(tmp_path / "m"))
    train(w2, 2)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # ignored stays ignored
    assert signal.getsignal(signal.SIGTERM) is not before
    w2.close()
    assert signal.getsignal(signal.SIGTERM) is before


def test_handle_signals_false_installs_nothing(tmp_path, handlers):
    before = signal.getsignal(signal.SIGTERM)
    with DebugWriter(str(tmp_path), handle_signals=False) as w:
        train(w, 2)
        assert signal.getsignal(signal.SIGTERM) is before
