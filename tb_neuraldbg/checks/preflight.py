"""The protocol: the cheap checks in reading order, and their text."""

from __future__ import annotations

import textwrap
from typing import Callable, Iterable

from torch import nn

from ._harness import CheckResult, adam
from .initial_loss import initial_loss
from .nonfinite import find_nonfinite
from .overfit import overfit_single_batch
from .units import dead_and_saturated_units

__all__ = ["run_preflight", "format_results"]


def run_preflight(
    model: nn.Module,
    batch,
    targets,
    criterion,
    num_classes: int | None = None,
    optimizer_factory: Callable = adam,
    steps: int = 200,
) -> list[CheckResult]:
    """The cheap checks in the order to read them: non-finite values, initial
    loss, dead/saturated units, single-batch overfit (the longest)."""
    return [
        find_nonfinite(model, batch, targets, criterion),
        initial_loss(model, batch, targets, criterion, num_classes=num_classes),
        dead_and_saturated_units(model, batch),
        overfit_single_batch(
            model, batch, targets, criterion, optimizer_factory=optimizer_factory, steps=steps
        ),
    ]


def format_results(results: Iterable[CheckResult], width: int = 80) -> str:
    """One block per result, wrapped to ``width`` columns, and a summary line."""
    results = list(results)
    lines = []
    for r in results:
        tag = "[ ok ]" if r.ok else "[FAIL]"
        head = f"{tag} {r.name}: "
        lines.extend(
            textwrap.wrap(head + r.message, width=width, subsequent_indent=" " * 7, break_on_hyphens=False)
        )
    failed = sum(not r.ok for r in results)
    summary = f"{len(results) - failed}/{len(results)} checks passed"
    lines.append(summary + (f", {failed} failed" if failed else ""))
    return "\n".join(lines)
