"""A NaN loss from an empty batch (batch size 0: a mean over nothing) says
that the batch was empty: the hooks keep the batch size of a batch they
cannot measure (the <input> row's value, 0), and the diagnosis, pure numpy,
names it in the message of the non-finite loss."""

import math

import numpy as np
import torch
from torch import nn

from tb_neuraldbg import DebugWriter, metadata
from tb_neuraldbg.diagnosis import Engine
from tb_neuraldbg.offline.reader import read_run
from tests.test_diagnosis import Run, feed

torch.set_num_threads(1)
M = metadata.METRIC_INDEX
EMPTY = "the batch of that step was empty (batch size 0)"


def test_a_training_step_on_an_empty_batch_is_named_in_the_losss_event(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    crit = nn.CrossEntropyLoss()
    losses = []
    with DebugWriter(str(tmp_path)) as w:
        w.watch(model, optimizer=opt, criterion=crit)
        g = torch.Generator().manual_seed(0)
        for step in range(14):
            n = 0 if step == 12 else 8  # a filter that let nothing through
            x, y = torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g)
            opt.zero_grad()
            loss = crit(model(x), y)
            losses.append(loss.item())
            loss.backward()
            opt.step()
    assert math.isnan(losses[12])
    run = read_run(str(tmp_path))
    names = run.layer_names
    assert run.stats[12, names.index("<input>"), M["value"]] == 0
    assert run.stats[11, names.index("<input>"), M["value"]] == 8
    (ev,) = [e for e in run.events if e["kind"] == "nonfinite" and e["to_state"] == "nonfinite"]
    assert ev["layer"] == "<loss>" and ev["step"] == 12 and EMPTY in ev["message"], run.events
    assert EMPTY in run.diagnosis["root_cause"]["message"]


def _nan_loss(batch_size):
    def plant(step, r):
        if step == 20:
            r[0] = np.nan  # nothing to measure in an empty batch ...
            r[0, M["value"]] = batch_size  # ... but its size
            r[-2, M["value"]] = np.nan
            r[-2, M["act_nonfinite"]] = 1
    return plant


def test_the_diagnosis_names_the_empty_batch_only_when_it_was_empty():
    run = Run()
    eng = Engine(run.layers)
    feed(eng, run, range(30), plant=_nan_loss(0))
    (ev,) = [e for e in eng.events if e.kind == "nonfinite" and e.to_state == "nonfinite"]
    assert ev.layer == "<loss>" and ev.step == 20 and EMPTY in ev.message and ev.extra["empty_batch"]
    run = Run()
    eng = Engine(run.layers)
    feed(eng, run, range(30), plant=_nan_loss(16))
    (ev,) = [e for e in eng.events if e.kind == "nonfinite" and e.to_state == "nonfinite"]
    assert "empty" not in ev.message and "empty_batch" not in ev.extra
