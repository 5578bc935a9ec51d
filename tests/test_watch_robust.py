"""watch() in real training stacks: wrapped optimizers, atomic watch, lost
writers (notebooks), loss modules inside the model, monitoring gaps said
out loud, and file faults that never reach the training loop."""

import glob
import os
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import tb_neuraldbg
import tb_neuraldbg.diagnosis as diagnosis
from tb_neuraldbg import DebugWriter, metadata
from tb_neuraldbg.offline.reader import read_run
from tb_neuraldbg.training import batches as batches_mod
from tb_neuraldbg.diagnosis.events import Event
from tests.test_writer import PlannedEngine, fit, json_values, load, planned, tiny  # noqa: F401 (fixture)

torch.set_num_threads(1)
M = metadata.METRIC_INDEX


def hooks_on(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def train(model, opt, steps, crit=None, seed=0):
    crit = crit or nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 4, generator=g)
        y = torch.randint(0, 2, (8,), generator=g)
        opt.zero_grad()
        crit(model(x), y).backward()
        opt.step()


# -- wrapped optimizers ------------------------------------------------------


class ZeroStyleWrapper:
    """A wrapper that is no Optimizer and exposes the real one as .optimizer."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def step(self):
        self.optimizer.step()

    def zero_grad(self):
        self.optimizer.zero_grad()


class HalfBuiltOptimizer(torch.optim.Optimizer):
    """accelerate's AcceleratedOptimizer: an Optimizer subclass that never
    calls Optimizer.__init__ (no hook registries) and wraps the real one."""

    def __init__(self, optimizer, scaler=None):
        self.optimizer = optimizer
        self.scaler = scaler

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def step(self, closure=None):
        self.optimizer.step()

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad()


@pytest.mark.parametrize("wrap", [ZeroStyleWrapper, HalfBuiltOptimizer], ids=["dot-optimizer", "accelerate-like"])
def test_a_wrapped_optimizer_is_unwrapped_and_records_every_step(tmp_path, wrap):
    model = tiny()
    inner = torch.optim.SGD(model.parameters(), lr=0.05)
    wrapped = wrap(inner)
    with DebugWriter(str(tmp_path)) as w:
        h = w.watch(model, optimizer=wrapped, criterion=nn.CrossEntropyLoss())
        assert h.instrument.optimizer is inner
        train(model, wrapped, 5)
        w.flush()
        assert w.stats_info["steps_analysed"] == 5


def test_the_scaler_a_wrapper_carries_is_taken(tmp_path):
    model = tiny()
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    wrapped = HalfBuiltOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), scaler=scaler)
    with DebugWriter(str(tmp_path)) as w:
        h = w.watch(model, optimizer=wrapped)
        assert h.instrument.scaler is scaler


def test_something_that_is_no_optimizer_is_refused_with_a_message(tmp_path):
    with DebugWriter(str(tmp_path)) as w:
        with pytest.raises(TypeError, match="torch.optim.Optimizer or a wrapper"):
            w.watch(tiny(), optimizer=object())


# -- atomic watch, lost writers ----------------------------------------------


class RefusesHooks(nn.Linear):
    def register_forward_hook(self, *a, **k):
        raise RuntimeError("no hooks on me")


def test_a_watch_that_fails_half_way_leaves_nothing_and_a_retry_works(tmp_path):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), RefusesHooks(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    w = DebugWriter(str(tmp_path / "a"))
    with pytest.raises(RuntimeError, match="no hooks on me"):
        w.watch(model, optimizer=opt)
    assert hooks_on(model) == 0
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks
    model[2] = nn.Linear(8, 2)
    h = w.watch(model, optimizer=opt)  # the retry, same writer
    first = hooks_on(model)
    h.remove()
    assert hooks_on(model) == 0 < first
    w.close()


def _notebook_cell(model, opt, logdir):
    # writer = DebugWriter(...); writer.watch(...); then the name is rebound.
    writer = DebugWriter(logdir)
    writer.watch(model, optimizer=opt)


def test_rerunning_a_notebook_cell_takes_over_from_the_lost_writer(tmp_path):
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    _notebook_cell(model, opt, str(tmp_path / "first"))
    train(model, opt, 3)
    before = hooks_on(model)
    with pytest.warns(RuntimeWarning, match="no longer in use"):
        _notebook_cell(model, opt, str(tmp_path / "second"))
    assert hooks_on(model) == before  # not doubled
    train(model, opt, 3)
    # The lost writer was closed with its data written.
    assert read_run(str(tmp_path / "first")).num_steps == 3
    assert tb_neuraldbg.unwatch(model) is True
    assert hooks_on(model) == 0
    assert tb_neuraldbg.unwatch(model) is False
    assert read_run(str(tmp_path / "second")).num_steps == 3


def test_a_writer_still_in_use_is_not_taken_over(tmp_path):
    model = tiny()
    w = DebugWriter(str(tmp_path / "a"))
    w.watch(model)
    other = DebugWriter(str(tmp_path / "b"))
    with pytest.raises(ValueError, match="unwatch"):
        other.watch(model)
    other.close()
    w.close()


# -- the loss inside the model -------------------------------------------------


class WithCrit(nn.Module):
    """The Lightning style: the loss module is an attribute of the model."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
        self.crit = nn.CrossEntropyLoss()

    def forward(self, x, y):
        return self.crit(self.net(x), y)


def test_a_loss_module_inside_the_model_is_the_loss_row_never_a_layer(tmp_path):
    torch.manual_seed(0)
    model = WithCrit()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with DebugWriter(str(tmp_path)) as w:
        w.watch(model, optimizer=opt)
        g = torch.Generator().manual_seed(0)
        for _ in range(40):
            x = torch.randn(16, 4, generator=g)
            y = (x[:, 0] > 0).long()
            opt.zero_grad()
            model(x, y).backward()
            opt.step()
    run = read_run(str(tmp_path))
    assert "crit" not in run.layer_names
    loss = run.stats[:, run.layer_names.index(metadata.PSEUDO_LOSS), M["value"]]
    assert np.isfinite(loss).all() and loss[-1] < loss[0]
    assert run.config["num_classes"] == 2
    assert run.diagnosis["status"] == "healthy", run.events


class OwnLoss(nn.Module):
    """The Hugging Face style: the model returns its own loss (a dict)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x, labels):
        logits = self.fc(x)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


def test_a_model_that_returns_its_loss_gives_the_loss_row(tmp_path):
    torch.manual_seed(0)
    model = OwnLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    with DebugWriter(str(tmp_path)) as w:
        w.watch(model, optimizer=opt)
        for _ in range(5):
            x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
            opt.zero_grad()
            out = model(x, labels=y)
            seen.append(out["loss"].item())
            out["loss"].backward()
            opt.step()
    run = read_run(str(tmp_path))
    loss = run.stats[:, run.layer_names.index(metadata.PSEUDO_LOSS), M["value"]]
    np.testing.assert_allclose(loss, seen, rtol=1e-6)


class ScoreHead(nn.Module):
    """Returns one number per call: a 0-dim tensor."""

    def forward(self, x):
        return x.mean()


def test_a_module_returning_a_0_dim_tensor_is_no_collapsed_activation(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1), ScoreHead())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with DebugWriter(str(tmp_path)) as w:
        w.watch(model, optimizer=opt)
        g = torch.Generator().manual_seed(0)
        for _ in range(30):
            x = torch.randn(16, 4, generator=g)
            opt.zero_grad()
            ((model(x) - 1.0) ** 2).backward()
            opt.step()
    run = read_run(str(tmp_path))
    assert not [e for e in run.events if e["kind"] == "activation_collapse"], run.events
    row = run.layer_names.index("3")
    assert np.isnan(run.stats[:, row, M["act_std"]]).all()
    assert (run.stats[:, row, M["act_nonfinite"]] == 0).all()


# -- gaps said out loud --------------------------------------------------------


def test_a_module_added_after_watch_is_said_once_and_watched(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    with DebugWriter(str(tmp_path)) as w:
        w.watch(model)
        with pytest.warns(RuntimeWarning, match="'head' was added to the model after watch") as rec:
            model.add_module("head", nn.Sequential(nn.Linear(8, 2), nn.Tanh()))
        assert len([r for r in rec if "added" in str(r.message)]) == 1
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for step in range(3):
            opt.zero_grad()
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
            w.record(loss=0.0)
    run = read_run(str(tmp_path))
    assert {"head.0", "head.1"} <= set(run.layer_names)
    i = run.layer_names.index("head.0")
    assert np.isfinite(run.stats[:, i, M["grad_norm"]]).all()


def test_stepping_with_another_optimizer_is_said(tmp_path):
    model = tiny()
    watched = torch.optim.SGD(model.parameters(), lr=0.05)
    other = torch.optim.SGD(model.parameters(), lr=0.05)
    with DebugWriter(str(tmp_path)) as w:
        w.watch(model, optimizer=watched)
        with pytest.warns(RuntimeWarning, match="did not step: is the model stepped by another optimizer"):
            train(model, other, 4)
        w.flush()
        assert w.stats_info["steps_analysed"] == 0


def _accumulate(path, zero_grad: bool) -> list:
    """8 steps of 4 micro-batches each, the watched optimizer's zero_grad()
    after each step or never; the events that blame accumulated gradients."""
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with DebugWriter(str(path)) as w:
        w.watch(model, optimizer=opt)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for _ in range(8):
                for _ in range(4):
                    nn.functional.cross_entropy(model(torch.randn(8, 4)), torch.randint(0, 2, (8,))).backward()
                opt.step()
                if zero_grad:
                    opt.zero_grad()
    assert w.stats_info["steps_analysed"] == 8
    return [e for e in read_run(str(path)).events if e.get("cause") == "grad_accumulation"]


def test_gradient_accumulation_with_the_watched_optimizer_is_not_said(tmp_path):
    assert _accumulate(tmp_path, zero_grad=True) == []


def test_gradients_never_zeroed_are_said_to_accumulate(tmp_path):
    # (the control of the test above: its run is long enough to tell)
    (e,) = _accumulate(tmp_path, zero_grad=False)
    assert (e["layer"], e["kind"], e["step"]) == ("<optimizer>", "exploding_gradient", 1)


def test_a_recovery_saves_no_batch_file(tmp_path, planned):
    planned.plan = {6: (4, "<input>", "data_anomaly", "error")}

    class Recovery(PlannedEngine):
        def update(self, step, row):
            if step == 9:
                e = Event(8, "<input>", "data_anomaly", "data_anomaly", "healthy", 1.0, "info", "recovered")
                self.events.append(e)
                return [e]
            return super().update(step, row)

    planned_engine = Recovery
    diagnosis.Engine = planned_engine  # the fixture's monkeypatch restores it
    with DebugWriter(str(tmp_path)) as w:
        fit(w, tiny(), 12)
    files = sorted(os.path.basename(p) for p in glob.glob(str(tmp_path / "*.npz")))
    assert files == ["neuraldbg_batch_step4.npz"]


# -- file faults never reach the training loop --------------------------------


def _fail_writes_after(monkeypatch, n):
    from tensorboard.summary.writer import record_writer

    real = record_writer.RecordWriter.write
    calls = {"n": 0}

    def write(self, data):
        calls["n"] += 1
        if calls["n"] > n:
            raise OSError(28, "No space left on device")
        return real(self, data)

    monkeypatch.setattr(record_writer.RecordWriter, "write", write)


def test_a_full_disk_is_warned_once_and_never_raises_into_training(tmp_path, monkeypatch):
    model = tiny()
    w = DebugWriter(str(tmp_path))
    w.add_scalar("user/x", 1.0, 0)
    w.flush()
    _fail_writes_after(monkeypatch, 0)
    with pytest.warns(RuntimeWarning, match="cannot write the event file") as rec:
        fit(w, model, 20)
        for step in range(20):
            w.add_scalar("user/x", float(step), step)  # SummaryWriter's own method
            w.add_histogram("user/h", np.arange(5.0), step)
        w.flush()
        w.close()
    assert len([r for r in rec if "cannot write the event file" in str(r.message)]) == 1


def test_a_deleted_logdir_does_not_raise_at_the_end_of_a_with_block(tmp_path):
    import shutil

    logdir = tmp_path / "gone"
    with DebugWriter(str(logdir)) as w:
        fit(w, tiny(), 5)
        shutil.rmtree(logdir)
        w.add_scalar("user/x", 1.0, 0)
    # and a writer reopened after close() on a path that cannot be made
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    w2 = DebugWriter(str(tmp_path / "ok"))
    w2.close()
    w2.log_dir = str(blocker / "sub")
    with pytest.warns(RuntimeWarning, match="cannot write the event file"):
        w2.add_scalar("user/x", 1.0, 0)
        w2.add_scalar("user/x", 2.0, 1)
    w2.close()


def test_events_are_written_and_flushed_even_when_the_ring_cannot_be(tmp_path, planned, monkeypatch):
    planned.plan = {5: (3, "0", "nonfinite", "error")}
    from tb_neuraldbg.training.worker import thread as worker_mod

    def broken_ring(self):
        raise OSError("ring lost")

    monkeypatch.setattr(worker_mod.Worker, "_flush_ring", broken_ring)
    w = DebugWriter(str(tmp_path))
    with pytest.warns(RuntimeWarning, match="ring"):
        fit(w, tiny(), 8)
        w.flush()
    (events,) = json_values(load(tmp_path), metadata.TAG_EVENTS)  # on disk before close()
    assert events[0]["layer"] == "0" and events[0]["severity"] == "error"
    w.close()


def test_batches_go_through_tensorboards_file_layer(tmp_path, planned, monkeypatch):
    planned.plan = {6: (4, "<input>", "data_anomaly", "error")}
    opened = []
    real = batches_mod.tf.io.gfile.GFile

    def spy(path, mode):
        opened.append(path)
        return real(path, mode)

    monkeypatch.setattr(batches_mod.tf.io.gfile, "GFile", spy)
    with DebugWriter(str(tmp_path)) as w:
        fit(w, tiny(), 10)
    opened = [p for p in opened if p.endswith(".npz")]
    assert opened == [f"{tmp_path}/neuraldbg_batch_step4.npz"]
    assert np.load(opened[0])["arg0"].shape == (8, 4)


def _unfreeze_at(tmp_path, step, opt_of):
    """A backbone frozen at watch() and unfrozen at ``step``; the optimizer
    built by ``opt_of(model)`` then. The run and its report."""
    from tb_neuraldbg.offline.rediagnose import diagnose_run

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3))
    for p in model[:4].parameters():
        p.requires_grad_(False)
    opt = opt_of(model)
    g = torch.Generator().manual_seed(0)
    with DebugWriter(str(tmp_path)) as w:
        w.watch(model, optimizer=opt, criterion=nn.CrossEntropyLoss())
        for s in range(80):
            if s == step:
                for p in model[:4].parameters():
                    p.requires_grad_(True)
            x = torch.randn(32, 8, generator=g)
            loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long() + (x[:, 1] > 0).long())
            opt.zero_grad()
            loss.backward()
            opt.step()
    run = read_run(str(tmp_path))
    return run, diagnose_run(run).to_report()


def test_a_backbone_unfrozen_after_watch_is_followed_from_then_on(tmp_path):
    """Unfrozen at step 10 while the optimizer holds every parameter: its
    gradients are recorded from step 10 (none before), and nothing is wrong."""
    run, rep = _unfreeze_at(tmp_path, 10, lambda m: torch.optim.Adam(m.parameters(), lr=1e-2))
    grad = run.stats[:, list(run.layer_names).index("0"), metadata.METRIC_INDEX["grad_norm"]]
    steps = list(run.steps)
    assert np.isnan(grad[steps.index(9)]) and grad[steps.index(10)] > 0
    assert rep["status"] == "healthy", rep["root_cause"]


def test_a_backbone_unfrozen_but_missing_from_the_optimizer_is_frozen_from_then_on(tmp_path):
    """The optimizer was built from the parameters trainable then (the
    head's): the backbone gets gradients from step 10 and never moves."""
    run, rep = _unfreeze_at(tmp_path, 10, lambda m: torch.optim.Adam(
        [p for p in m.parameters() if p.requires_grad], lr=1e-2))
    rc = rep["root_cause"]
    assert rc["kind"] == "frozen_weights" and rc["layer"] in ("0", "2") and 10 <= rc["step"] <= 20, rc
