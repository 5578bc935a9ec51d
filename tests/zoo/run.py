"""Train one architecture of the zoo under the DebugWriter, with one fault
planted (or none), and read back the report of ``neuraldbg report --json``.

The loop is the ordinary one (zero_grad, forward, loss, backward, step) with
AdamW at 1e-3, one CPU thread, no download."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import nn

from tb_neuraldbg import DebugWriter
from tb_neuraldbg.format.contract import run_report
from tb_neuraldbg.reader import read_logdir

from . import tasks
from .faults import Planter

__all__ = ["STEPS", "AT", "LR", "Outcome", "train"]

STEPS = 150
#: the planted step: not a multiple of the writer's stats_every (10), so an
#: onset read from a sampled statistic is tested honestly
AT = 103
LR = 1e-3


@dataclass
class Outcome:
    """A finished run: its report (DESIGN.md's JSON of one run, as
    ``neuraldbg report --json`` gives it), the losses, the trained model."""

    report: dict
    losses: list
    model: nn.Module


def train(arch, fault: str, logdir: str, steps: int = STEPS, at: int = AT, seed: int = 0) -> Outcome:
    """Train ``arch`` with ``fault`` planted at ``at``."""
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # configs' notes about unused token ids
        model = arch.build()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    crit = nn.CrossEntropyLoss()
    planter = Planter(arch, fault, at)
    planter.setup(model)
    losses = []
    with DebugWriter(logdir) as writer:
        writer.watch(model, optimizer=opt, criterion=crit)
        for step in range(steps):
            planter.before(step, model, opt)
            inputs, target = tasks.batch(arch.task, step, seed)
            inputs = planter.inputs(step, inputs)
            opt.zero_grad(set_to_none=True)
            loss = crit(tasks.logits(arch.task, model, inputs), target)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    (run,) = read_logdir(logdir)
    return Outcome(run_report(run.name, run.diagnosis, run.events), losses, model)
