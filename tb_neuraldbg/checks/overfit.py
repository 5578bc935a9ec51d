"""Check 2: can the model memorise one batch? A model that cannot has broken
plumbing."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ._harness import CheckResult, Preserved, adam, loss_of, train_steps, trainable

__all__ = ["OverfitResult", "overfit_single_batch"]


@dataclass(frozen=True)
class OverfitResult(CheckResult):
    """The loss before and after training on one batch, and its history."""

    initial_loss: float
    final_loss: float
    steps: int  # optimizer steps taken (stops early once the goal is met)
    losses: tuple[float, ...]  # training loss before each step
    no_grad_params: tuple[str, ...]  # trainable parameters no gradient reached


def overfit_single_batch(
    model: nn.Module,
    batch,
    targets,
    criterion,
    optimizer_factory: Callable = adam,
    steps: int = 200,
    rel_drop: float = 0.9,
    floor: float = 0.05,
    check_every: int = 10,
) -> OverfitResult:
    """Can the model memorise one batch?

    Trains a fresh optimizer from ``optimizer_factory(params)`` for up to
    ``steps`` steps on the one batch, stopping early (checked every
    ``check_every`` steps) once the loss has fallen by ``rel_drop`` (90 %) of
    its initial value or below ``floor``; ok when that happens. A model that
    cannot memorise a few examples has broken plumbing: labels that do not
    match the inputs, a detached output, a loss that gets the wrong thing, a
    zero learning rate, parameters missing from the optimizer. Weights are
    restored afterwards.
    """
    if steps < 1:
        raise ValueError("steps must be >= 1")
    names = trainable(model)
    with Preserved(model):
        opt = optimizer_factory([p for _, p in names])
        losses: list[torch.Tensor] = []
        no_grad: tuple[str, ...] = ()
        goal = None
        taken = 0
        feed = itertools.repeat((batch, targets))
        for step, (loss, problem) in enumerate(train_steps(model, opt, criterion, feed, steps)):
            if problem:
                v = float(loss)
                return OverfitResult(
                    "overfit_single_batch", False, f"cannot train on one batch: {problem}",
                    v, v, 0, (v,), tuple(n for n, _ in names),
                )
            losses.append(loss.detach())
            if step == 0:
                goal = max(float(loss.detach()) * (1 - rel_drop), floor)
            loss.backward()
            if step == 0:
                no_grad = tuple(n for n, p in names if p.grad is None)
            opt.step()
            taken += 1
            if (step + 1) % check_every == 0 and float(losses[-1]) <= goal:
                break
        with torch.no_grad():
            final = float(loss_of(model, batch, targets, criterion)[1])
    history = tuple(torch.stack(losses).float().cpu().tolist())
    ok = math.isfinite(final) and final <= goal
    msg = _message(history[0], final, taken, goal, no_grad, ok)
    return OverfitResult("overfit_single_batch", ok, msg, history[0], final, taken, history, no_grad)


def _message(first: float, final: float, taken: int, goal: float, no_grad: tuple[str, ...], ok: bool) -> str:
    what = f"loss {first:.4g} -> {final:.4g} in {taken} steps on one batch (goal <= {goal:.3g})"
    if ok:
        return f"{what}: the model can memorise a batch, so the plumbing works."
    hints = []
    if no_grad:
        shown = ", ".join(no_grad[:4]) + (", ..." if len(no_grad) > 4 else "")
        hints.append(f"no gradient reached {len(no_grad)} trainable parameters ({shown})")
    if not math.isfinite(final):
        hints.append("the loss became non-finite: lower the learning rate")
    hints.append(
        "check that the labels belong to the inputs (same shuffling, same order), the "
        "loss gets raw logits, the output is not detached, the learning rate is not zero "
        "and every parameter is in the optimizer; then try more steps or a larger lr"
    )
    return f"{what}: the model cannot fit one batch. " + "; ".join(hints) + "."
