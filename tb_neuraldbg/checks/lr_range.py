"""Check 3: Smith's learning-rate range test, a suggested lr from a sweep."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ._harness import CheckResult, Preserved, batches, train_steps, trainable

__all__ = ["LRRangeResult", "lr_range_test"]


@dataclass(frozen=True)
class LRRangeResult(CheckResult):
    """The swept curve and the learning rates read from it."""

    lrs: tuple[float, ...]
    losses: tuple[float, ...]  # raw loss at each lr
    smoothed: tuple[float, ...]  # debiased exponential moving average
    suggested_lr: float | None  # steepest descent of the smoothed curve
    lr_min_div10: float | None  # lr of the smallest smoothed loss, / 10


def _smooth(losses: list[float], beta: float) -> list[float]:
    avg, out = 0.0, []
    for i, v in enumerate(losses):
        avg = beta * avg + (1 - beta) * v
        out.append(avg / (1 - beta ** (i + 1)))
    return out


def lr_range_test(
    model: nn.Module,
    batch_iter_or_batch,
    targets,
    criterion,
    optimizer_cls=torch.optim.SGD,
    start_lr: float = 1e-7,
    end_lr: float = 10.0,
    steps: int = 100,
    beta: float = 0.98,
    diverge: float = 4.0,
    optimizer_kwargs: dict | None = None,
) -> LRRangeResult:
    """Smith's learning-rate range test (as in fastai's ``lr_find``).

    The lr grows exponentially from ``start_lr`` to ``end_lr`` over ``steps``
    training steps, ``lr_i = start_lr * (end_lr/start_lr) ** (i/(steps-1))``.
    The loss is smoothed by a debiased moving average (``beta``); the sweep
    stops when the smoothed loss exceeds ``diverge`` (4) x its best, or is not
    finite. ``suggested_lr`` is where the smoothed loss falls fastest against
    log(lr) (ignoring the first 10 % and last 5 points); ``lr_min_div10`` is
    the lr of the smallest smoothed loss divided by 10. ``targets`` given:
    ``batch_iter_or_batch`` is one batch, used at every step. ``targets`` None:
    it is an iterable of ``(inputs, targets)`` (a DataLoader), restarted when
    exhausted. Weights are restored afterwards.
    """
    if not (0 < start_lr < end_lr):
        raise ValueError("need 0 < start_lr < end_lr")
    if steps < 2:
        raise ValueError("steps must be >= 2")
    names = trainable(model)
    ratio = end_lr / start_lr
    lrs: list[float] = []
    losses: list[float] = []
    best = math.inf
    with Preserved(model):
        opt = optimizer_cls([p for _, p in names], lr=start_lr, **(optimizer_kwargs or {}))
        feed = batches(batch_iter_or_batch, targets)
        for i, (loss, problem) in enumerate(train_steps(model, opt, criterion, feed, steps)):
            if problem:
                msg = f"cannot sweep: {problem}"
                return LRRangeResult("lr_range_test", False, msg, (), (), (), None, None)
            # Only opt.step() reads the lr, so setting it after the forward is soon enough.
            lr = start_lr * ratio ** (i / (steps - 1))
            for g in opt.param_groups:
                g["lr"] = lr
            lrs.append(lr)
            losses.append(float(loss.detach()))  # needed now: the sweep stops on divergence
            sm = _smooth(losses, beta)[-1]
            if not math.isfinite(sm) or (i > 0 and sm > diverge * best):
                break
            best = min(best, sm)
            loss.backward()
            opt.step()
    smoothed = _smooth(losses, beta)
    # The point that tripped the stop is kept in the curves but not used.
    usable = [i for i in range(len(smoothed)) if math.isfinite(smoothed[i]) and smoothed[i] <= diverge * best]
    n = usable[-1] + 1 if usable else 0
    suggested, div10 = _suggestions(lrs[:n], smoothed[:n])
    fell = n >= 2 and min(smoothed[:n]) < 0.9 * smoothed[0]
    ok = suggested is not None and fell
    msg = _message(lrs, smoothed[:n], suggested, div10, fell, ok)
    return LRRangeResult(
        "lr_range_test", ok, msg, tuple(lrs), tuple(losses), tuple(smoothed), suggested, div10
    )


def _suggestions(lrs: list[float], smoothed: list[float]) -> tuple[float | None, float | None]:
    """(steepest-descent lr, lr of the minimum / 10) of the usable curve;
    None where the curve is too short to tell."""
    n = len(smoothed)
    lo, hi = max(1, n // 10), n - 5
    suggested = div10 = None
    if n >= 2:
        i_min = min(range(n), key=lambda i: smoothed[i])
        div10 = lrs[i_min] / 10
    if hi - lo >= 2:
        logs = [math.log(lr) for lr in lrs]
        slopes = {
            i: (smoothed[i + 1] - smoothed[i - 1]) / (logs[i + 1] - logs[i - 1]) for i in range(lo, hi)
        }
        i_steep = min(slopes, key=slopes.get)
        if slopes[i_steep] < 0:
            suggested = lrs[i_steep]
    return suggested, div10


def _message(
    lrs: list[float], usable: list[float], suggested: float | None, div10: float | None, fell: bool, ok: bool
) -> str:
    span = f"{len(lrs)} steps, lr {lrs[0]:.2g} -> {lrs[-1]:.2g}" if lrs else "no steps"
    if ok:
        return (
            f"{span}; loss {usable[0]:.4g} -> best {min(usable):.4g}. Suggested lr "
            f"{suggested:.3g} (steepest descent); min/10 gives {div10:.3g}. Start between them."
        )
    if not fell:
        return (
            f"{span}: the loss never fell by 10 % at any lr. The model is not learning: run "
            "overfit_single_batch, check the labels, the loss and that gradients reach the "
            "parameters; or widen the sweep (end_lr)."
        )
    return (
        f"{span}: the loss fell but the curve is too short to find a steep part (it "
        "diverged early): lower start_lr or use more steps."
    )
