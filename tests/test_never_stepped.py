"""A run whose watched optimizer never steps (a step is recorded at each
``optimizer.step()``) records, at close, the step in progress once, with the
count of its backward passes on ``<optimizer>`` (``steps_missing``): the report
names ``frozen_weights`` at ``<optimizer>`` instead of finding no readable data,
and close() says so too (issue #42). Runs that step are recorded as before."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from tb_neuraldbg import DebugWriter, cli
from tb_neuraldbg.diagnosis import Engine
from tb_neuraldbg.diagnosis.explain import value_label
from tb_neuraldbg.format import metadata
from tb_neuraldbg.reader import read_logdir

_M = metadata.METRIC_INDEX


def _train(logdir, steps: str = "never", n: int = 6, analysis: str = "thread"):
    """``n`` backward passes of a small classifier under a DebugWriter, then
    close(). ``steps``: "never" (scheduler.step() in place of opt.step(): the
    bug), "every", "every4" (gradient accumulation), "once" (at the third).
    Returns the close warnings about it and the model."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 10)
    crit = nn.CrossEntropyLoss()
    w = DebugWriter(str(logdir))
    w.watch(model, optimizer=opt, criterion=crit, analysis=analysis)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for i in range(n):
            if steps != "every4" or i % 4 == 0:
                opt.zero_grad()
            crit(model(torch.randn(16, 8)), torch.randint(0, 3, (16,))).backward()
            if steps == "every" or (steps == "every4" and i % 4 == 3) or (steps == "once" and i == 2):
                opt.step()
            sched.step()  # (without opt.step() first: the bug)
        w.close()
    return [str(x.message) for x in seen if "never stepped" in str(x.message)], model


def _report(logdir, capsys, *options) -> dict:
    assert cli.main(["report", str(logdir), "--json", *options]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    return run


def _run(logdir):
    (run,) = read_logdir(str(logdir))
    return run


def _missing(run) -> np.ndarray:
    """The steps_missing column of every row and step."""
    return run.stats[:, :, _M["steps_missing"]]


def test_an_optimizer_that_never_steps_is_said_at_close(tmp_path):
    (msg,) = _train(tmp_path)[0]
    assert "6 backward pass(es)" in msg and "scheduler.step()" in msg


@pytest.mark.parametrize("options", [(), ("--rediagnose",)], ids=["stored", "rediagnosed"])
def test_the_report_names_an_optimizer_that_never_stepped(tmp_path, capsys, options):
    _train(tmp_path)
    run = _report(tmp_path, capsys, *options)
    assert run["status"] == "failing"
    rc = run["root_cause"]
    assert (rc["kind"], rc["layer"], rc["step"]) == ("frozen_weights", "<optimizer>", 0)
    assert "the optimizer never stepped: 6 backward passes, no optimizer.step()" in rc["message"]
    assert "scheduler.step() does not update the weights" in rc["message"]
    (ev,) = [e for e in run["events"] if e["severity"] != "info"]
    assert (ev["kind"], ev["layer"], ev["step"], ev["value"]) == ("frozen_weights", "<optimizer>", 0, 6.0)
    assert ev["severity"] == metadata.STATE_SEVERITY["frozen"]


@pytest.mark.slow  # (a worker process)
def test_a_worker_process_writes_it_too(tmp_path, capsys):
    _train(tmp_path, analysis="process")
    rc = _report(tmp_path, capsys)["root_cause"]
    assert (rc["kind"], rc["layer"], rc["step"]) == ("frozen_weights", "<optimizer>", 0)


def test_the_terminal_report_words_it(tmp_path, capsys):
    _train(tmp_path)
    assert cli.main(["report", str(tmp_path)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "FAILING" in text and "the optimizer never stepped: 6 backward passes" in text
    assert "learning rate 6" not in text  # (the event's value is a count, not the rate)
    assert value_label("frozen_weights", "<optimizer>", {"cause": "never_stepped"}) == (
        metadata.METRIC_INFO["steps_missing"].label)


def test_its_one_row_holds_what_the_hooks_measured(tmp_path):
    """The step in progress, as with gradient accumulation: the gradients
    of the last backward (the optimizer never cleared nor used them)."""
    _, model = _train(tmp_path)
    run = _run(tmp_path)
    names = [layer["name"] for layer in run.layers]
    assert run.steps.tolist() == [0]
    missing = _missing(run)[0]
    opt = names.index("<optimizer>")
    assert missing[opt] == 6 and np.isnan(np.delete(missing, opt)).all()
    for name in ("0", "2"):
        grads = [p.grad.norm() for p in model.get_submodule(name).parameters()]
        expected = torch.linalg.vector_norm(torch.stack(grads))
        assert run.stats[0, names.index(name), _M["grad_norm"]] == pytest.approx(float(expected), rel=1e-5)
    assert np.isfinite(run.stats[0, names.index("<loss>"), _M["value"]])


@pytest.mark.parametrize("steps, rows", [("every4", [0, 1]), ("once", [0]), ("every", [0, 1, 2, 3, 4, 5])])
def test_a_run_that_steps_is_recorded_as_before(tmp_path, capsys, steps, rows):
    """Gradient accumulation that steps every 4th backward, a run that
    stepped once, and an ordinary one: a row per optimizer.step(), nothing
    at close, no word of it."""
    said, _ = _train(tmp_path, steps, n=8 if steps == "every4" else 6)
    assert said == []
    run = _run(tmp_path)
    assert run.steps.tolist() == rows
    assert np.isnan(_missing(run)).all()
    report = _report(tmp_path, capsys)
    assert not any("never stepped" in e["message"] for e in report["events"])


def test_record_without_an_optimizer_is_unaffected(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    w = DebugWriter(str(tmp_path))
    w.watch(model)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            loss = model(torch.randn(5, 4)).pow(2).mean()
            loss.backward()
            w.record(loss=loss)
        w.close()
    assert not any("never stepped" in str(x.message) for x in seen)
    run = _run(tmp_path)
    assert run.steps.tolist() == [0, 1, 2]
    assert np.isnan(_missing(run)).all()


def test_it_is_said_once_when_the_hooks_are_removed_before_close(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    w = DebugWriter(str(tmp_path))
    handle = w.watch(model, optimizer=opt)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        model(torch.randn(3, 4)).sum().backward()
        handle.remove()
        model(torch.randn(3, 4)).sum().backward()  # (unwatched now)
        w.close()
    assert sum("never stepped" in str(x.message) for x in seen) == 1
    run = _run(tmp_path)
    assert run.steps.tolist() == [0]  # recorded at remove(), once
    assert np.nanmax(_missing(run)) == 1
    assert run.diagnosis["root_cause"]["layer"] == "<optimizer>"


def _rows(n_layers: int, missing: float) -> tuple[list, np.ndarray]:
    layers = [{"name": "<input>", "type": "input"}] + [{"name": f"fc{i}", "type": "Linear"} for i in range(n_layers)]
    layers += [{"name": "<loss>", "type": "loss"}, {"name": "<optimizer>", "type": "optimizer"}]
    row = np.full((len(layers), len(metadata.METRICS)), np.nan, np.float32)
    row[1:-2, _M["grad_norm"]] = 0.1
    row[1:-2, _M["grad_missing"]] = 0
    row[-2, _M["value"]] = 1.1
    row[-1, _M["value"]] = 0.1
    row[-1, _M["steps_missing"]] = missing
    return layers, row


def test_the_engine_confirms_it_at_the_end_of_a_one_row_run():
    """One row is no hysteresis: the decision is the run's end's (finish)."""
    layers, row = _rows(3, 4)
    engine = Engine(layers)
    assert not [e for e in engine.update(0, row) if e.kind == "frozen_weights"]
    (ev,) = [e for e in engine.finish() if e.kind == "frozen_weights"]
    assert (ev.layer, ev.step, ev.value, ev.extra["backward_passes"]) == ("<optimizer>", 0, 4.0, 4)
    assert engine.status == "failing"
    assert engine.root_cause["layer"] == "<optimizer>" and "4 backward passes" in engine.root_cause["message"]


def test_a_row_without_the_fact_finishes_silent():
    layers, row = _rows(3, np.nan)
    engine = Engine(layers)
    engine.update(0, row)
    assert not [e for e in engine.finish() if e.kind == "frozen_weights"]
