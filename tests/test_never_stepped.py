"""A run whose watched optimizer never steps records nothing (a step is
recorded at each ``optimizer.step()``): close() says so instead of leaving
a logdir with no readable data and no word why."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from tb_neuraldbg import DebugWriter


def _train(logdir, steps_optimizer: bool, n: int = 6):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 10)
    crit = nn.CrossEntropyLoss()
    w = DebugWriter(str(logdir))
    w.watch(model, optimizer=opt, criterion=crit)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(n):
            opt.zero_grad()
            crit(model(torch.randn(16, 8)), torch.randint(0, 3, (16,))).backward()
            if steps_optimizer:
                opt.step()
            sched.step()  # (without opt.step() first: the bug)
        w.close()
    return [str(x.message) for x in seen if "never stepped" in str(x.message)]


def test_an_optimizer_that_never_steps_is_said_at_close(tmp_path):
    (msg,) = _train(tmp_path, steps_optimizer=False)
    assert "6 backward pass(es)" in msg and "scheduler.step()" in msg


def test_a_run_that_steps_is_not_warned(tmp_path):
    assert _train(tmp_path, steps_optimizer=True) == []


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
        w.close()
    assert sum("never stepped" in str(x.message) for x in seen) == 1
