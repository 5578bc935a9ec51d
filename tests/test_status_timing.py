"""A run's stored status is a function of its recorded steps, not of when
the writer's worker analysed them or whether close() finished."""

import time
import warnings

import pytest
import torch
from torch import nn

from tb_neuraldbg import DebugWriter, diagnosis
from tb_neuraldbg.offline.reader import read_logdir
from tb_neuraldbg.training.worker import thread

#: (trainings of a few seconds each on a shared CPU: the slow tier)
pytestmark = pytest.mark.slow
STEPS = 60


def _train(logdir: str, drain_only: bool = False, analysis: str = "thread") -> dict:
    """A 4-class classifier whose loss starts far above ln 4 (its last layer
    scaled up) and then falls: an initial_loss warning resolved without an
    event of its own. ``drain_only``: the report is read after a drain (what
    SIGTERM without exit does, or a run killed before close), else after close."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    with torch.no_grad():
        model[2].weight.mul_(40.0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    crit = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    proto = torch.randn(4, 8, generator=g)
    writer = DebugWriter(logdir)
    try:
        writer.watch(model, optimizer=opt, criterion=crit, analysis=analysis)
        for _ in range(STEPS):
            y = torch.randint(0, 4, (32,), generator=g)
            x = proto[y] + 0.3 * torch.randn(32, 8, generator=g)
            opt.zero_grad()
            crit(model(x), y).backward()
            opt.step()
        if drain_only:
            assert writer._worker.drain(60)
            return _stored(logdir)
    finally:
        writer.close()
    return _stored(logdir)


def _stored(logdir: str) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a drained run was not closed: the reader says so)
        (run,) = read_logdir(logdir)
    return {"diagnosis": run.diagnosis, "events": [(e["kind"], e["layer"], e["step"], e["severity"], e["to_state"])
                                                   for e in run.events]}


@pytest.mark.parametrize("analysis", ["thread", "process"])
def test_a_warning_resolved_without_an_event_is_stored_as_resolved_before_close(tmp_path, analysis):
    closed = _train(str(tmp_path / "closed"), analysis=analysis)
    drained = _train(str(tmp_path / "drained"), drain_only=True, analysis=analysis)
    assert [e[0] for e in closed["events"]] == ["initial_loss"]  # the warning, and nothing after it
    assert closed["diagnosis"]["status"] == "healthy" and closed["diagnosis"]["root_cause"]["kind"] == "initial_loss"
    # before: the status stored at the warning's step ("failing") until close
    assert drained == closed


def test_the_report_does_not_depend_on_how_fast_the_diagnosis_runs(tmp_path, monkeypatch):
    fast = _train(str(tmp_path / "fast"))

    class SlowEngine(diagnosis.Engine):
        def update(self, step, row):
            time.sleep(0.002)  # a loaded machine: training runs ahead of the worker
            return super().update(step, row)

    monkeypatch.setattr(diagnosis, "Engine", SlowEngine)
    monkeypatch.setattr(thread, "BURST", 3)
    slow = _train(str(tmp_path / "slow"))
    slow_drained = _train(str(tmp_path / "slow_drained"), drain_only=True)
    assert fast == slow == slow_drained



def test_each_packet_carries_the_class_count_as_of_its_step(tmp_path):
    """K of the watched cross-entropy goes with each step's packet, so a
    worker that lags behind training judges step 0's loss with step 0's K
    (unknown here: the criterion is first called at step 10), not with the
    K the instrument learnt since."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    crit = nn.CrossEntropyLoss()
    writer = DebugWriter(str(tmp_path))
    seen = []
    try:
        handle = writer.watch(model, optimizer=opt, criterion=crit)
        put = handle.instrument.sink
        handle.instrument.sink = lambda p: (seen.append((p.step, p.num_classes)), put(p))
        for step in range(14):
            x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))
            opt.zero_grad()
            if step < 10:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                writer.record(loss=loss)
            else:
                loss = crit(model(x), y)
            loss.backward()
            opt.step()
    finally:
        writer.close()
    assert seen == [(s, None if s < 10 else 4) for s in range(14)]
