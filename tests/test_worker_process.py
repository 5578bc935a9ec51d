"""watch(analysis="process"): the worker in a child process writes what the
worker's thread writes, raises what it raises, saves the same batches, and a
child that dies costs only the steps in flight."""

from __future__ import annotations

import json
import os
import signal
import time
import warnings

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util
from torch import nn

from tb_neuraldbg import DebugWriter, metadata
from tb_neuraldbg.training.worker.process import ProcessWorker
from tb_neuraldbg.training.writer import TrainingFailure

pytestmark = [pytest.mark.slow,  # (a child interpreter a test)
              pytest.mark.skipif(os.name != "posix", reason="the worker process needs a POSIX system")]


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))


def train(logdir, steps, nan_at=None, kill_at=None, flush_at=None, **watch):
    """Trains a fresh model; a NaN batch at ``nan_at``; the child killed
    before step ``kill_at``; everything analysed before step ``flush_at``.
    Returns the writer (closed)."""
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    crit = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    with DebugWriter(str(logdir)) as w:
        w.watch(m, optimizer=opt, criterion=crit, **watch)
        for step in range(steps):
            if step == flush_at:
                w.flush()
            if step == kill_at:
                w.flush()
                os.kill(w._worker._proc.pid, signal.SIGKILL)
                w._worker._proc.wait()
            x = torch.randn(16, 4, generator=g)
            if step == nan_at:
                x[3, 1] = float("nan")
            y = torch.randint(0, 3, (16,), generator=g)
            opt.zero_grad()
            crit(m(x), y).backward()
            opt.step()
    return w


def contents(logdir) -> dict:
    """{tag: [(step, the tensor's bytes)]} of every tensor record written."""
    acc = EventAccumulator(str(logdir), size_guidance={"tensors": 0})
    acc.Reload()
    def value(proto):
        a = tensor_util.make_ndarray(proto)
        return a.tolist() if a.dtype == object else a.tobytes()  # (JSON strings, or numbers' bytes)

    return {t: [(e.step, value(e.tensor_proto)) for e in acc.Tensors(t)] for t in acc.Tags()["tensors"]}


def test_the_child_writes_what_the_thread_writes(tmp_path):
    train(tmp_path / "thread", 80, nan_at=50)
    b = train(tmp_path / "process", 80, nan_at=50, analysis="process")
    assert isinstance(b._last_worker, ProcessWorker) and b._last_worker.fallback is None
    thread, process = contents(tmp_path / "thread"), contents(tmp_path / "process")
    assert metadata.TAG_EVENTS in thread and len(thread[metadata.TAG_STATES]) == 80
    assert thread.keys() == process.keys()
    configs = [json.loads(c[0][1]) for c in (thread.pop(metadata.TAG_CONFIG), process.pop(metadata.TAG_CONFIG))]
    assert [c.pop("analysis") for c in configs] == ["thread", "process"]
    assert configs[0] == configs[1] and configs[0]["num_classes"] == 3
    for tag in (metadata.TAG_SESSION_START, metadata.TAG_SESSION_END):  # (each writer's own id and pid)
        assert len(thread.pop(tag)) == len(process.pop(tag)) == 1
    for tag in thread:
        assert thread[tag] == process[tag], tag
    # the batch behind the events, saved by the training process on the child's request
    assert sorted(os.listdir(tmp_path / "thread")) != [] and [
        f for f in os.listdir(tmp_path / "process") if f.endswith(".npz")] == [
        f for f in os.listdir(tmp_path / "thread") if f.endswith(".npz")] == ["neuraldbg_batch_step50.npz"]
    info = b.stats_info
    assert info["steps_analysed"] == 80 and info["engine"] and info["worker_ms_per_step"] > 0


def test_on_error_raise_comes_back_from_the_child(tmp_path):
    # (flushed: the child starts in about a second, and this loop's steps take microseconds)
    with pytest.raises(TrainingFailure) as e:
        train(tmp_path, 40, nan_at=20, flush_at=30, analysis="process", on_error="raise")
    assert e.value.events and e.value.diagnosis["status"] == "failing"
    assert e.value.diagnosis["root_cause"]["step"] == 20


def test_a_child_that_dies_hands_over_to_the_thread(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w = train(tmp_path, 120, kill_at=60, analysis="process")
    assert any("worker process ended" in str(c.message) for c in caught), [str(c.message) for c in caught]
    assert w._last_worker.fallback is not None
    # Written by the child before it was killed: the rows out of its ring of 32
    # (the ring's are lost with it); then every step, by the thread.
    steps = [s for s, _ in contents(tmp_path)[metadata.TAG_STATES]]
    assert steps == list(range(60 - 32)) + list(range(60, 120))


def test_analysis_must_be_thread_or_process(tmp_path):
    with DebugWriter(str(tmp_path)) as w, pytest.raises(ValueError, match="analysis"):
        w.watch(model(), analysis="processes")


def test_a_child_that_cannot_start_leaves_the_thread(tmp_path, monkeypatch):
    def refuse(self):
        raise OSError("no such executable")

    monkeypatch.setattr(ProcessWorker, "start", refuse)
    with pytest.warns(RuntimeWarning, match="could not start"):
        w = train(tmp_path, 5, analysis="process")
    assert type(w._last_worker).__name__ == "Worker" and w.stats_info["steps_analysed"] == 5
    assert np.array(contents(tmp_path)[metadata.TAG_STATES]).shape[0] == 5


def test_the_child_runs_without_torch(tmp_path, monkeypatch):
    # (torch is a second and 200 MB of the child's start: the worker needs numpy and protobuf only)
    from tb_neuraldbg.training.worker import process as worker_process

    seen = tmp_path / "modules.json"
    monkeypatch.setattr(worker_process, "_CHILD_MAIN", worker_process._CHILD_MAIN + (
        "import json\n"
        f"open({str(seen)!r}, 'w').write(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')))\n"))
    w = train(tmp_path / "run", 60, nan_at=40, flush_at=50, analysis="process")  # (an event, a batch saved)
    assert w._last_worker.fallback is None and w.stats_info["steps_analysed"] == 60
    assert any(f.startswith("neuraldbg_batch_step40") for f in os.listdir(tmp_path / "run"))
    assert json.loads(seen.read_text()) == []


def test_stats_info_follows_the_child_without_a_flush(tmp_path):
    # (its counters come back after each burst, not only with sync's acknowledgement)
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    crit = nn.CrossEntropyLoss()
    with DebugWriter(str(tmp_path)) as w:
        w.watch(m, optimizer=opt, criterion=crit, analysis="process")
        for _ in range(40):
            opt.zero_grad()
            crit(m(torch.randn(16, 4)), torch.randint(0, 3, (16,))).backward()
            opt.step()
        deadline = time.monotonic() + 120
        while w.stats_info["steps_analysed"] < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        info = w.stats_info
    assert info["steps_analysed"] == 40 and info["rows_written"] > 0 and info["engine"], info
    assert info["worker_ms_per_step"] is not None, info


def test_the_child_judges_by_the_run_s_thresholds(tmp_path):
    from tb_neuraldbg.diagnosis import Thresholds

    # (thresholds that call a healthy network's earlier layers vanishing: the child must get them)
    strict = Thresholds(vanish_ratio=0.99, vanish_exit_ratio=0.999)
    train(tmp_path / "thread", 40, thresholds=strict)
    train(tmp_path / "process", 40, thresholds=strict, analysis="process")
    thread, process = contents(tmp_path / "thread"), contents(tmp_path / "process")
    events = [json.loads(v) for _, v in thread[metadata.TAG_EVENTS]]
    assert any(e["kind"] == "vanishing_gradient" for batch in events for e in batch), events
    assert thread[metadata.TAG_EVENTS] == process[metadata.TAG_EVENTS]
    assert thread[metadata.TAG_STATES] == process[metadata.TAG_STATES]


def test_the_child_gets_every_setting_of_the_run():
    import dataclasses

    from tb_neuraldbg.diagnosis import Thresholds
    from tb_neuraldbg.training.worker import process as worker_process
    from tb_neuraldbg.training.schedule import WatchConfig

    defaults = WatchConfig()
    config = WatchConfig(include=[nn.Linear, "2"], exclude=["3"], max_layers=7, stats_every=3, update_every=5,
                         hist_every=0, full_steps=50, ring=4, on_error="raise", start_step=11, save_batches=False,
                         nonfinite="every_step", analysis="process", thresholds=Thresholds(vanish_ratio=0.2),
                         layer_scalars_every=20, grad_clip=1.0)
    changed = [f.name for f in dataclasses.fields(WatchConfig) if getattr(config, f.name) != getattr(defaults, f.name)]
    assert changed == [f.name for f in dataclasses.fields(WatchConfig)]  # (a new field: give it a value here)
    sent = worker_process._json(dataclasses.asdict(config))[worker_process._LENGTH.size:]
    child = worker_process._config(json.loads(sent))
    assert child.include == [str(nn.Linear), "2"]  # (module types by name: the child never selects modules)
    assert dataclasses.replace(child, include=config.include) == config


def test_a_step_that_cannot_be_sent_costs_that_step_only(tmp_path, monkeypatch):
    send = ProcessWorker._send_packet

    def flaky(self, packet):
        if packet.step == 5:
            raise ValueError("a packet that cannot be sent")
        return send(self, packet)

    monkeypatch.setattr(ProcessWorker, "_send_packet", flaky)
    with pytest.warns(RuntimeWarning, match="writer step failed: ValueError"):
        train(tmp_path, 12, analysis="process")
    assert [s for s, _ in contents(tmp_path)[metadata.TAG_STATES]] == [s for s in range(12) if s != 5]
