"""The step's non-finite check: is the step dirty, may its replay be trusted, when to count exactly.

With ``nonfinite="replay"`` each step checks what it computes anyway (the
gradient norms, the loss, the batch, on full steps every statistic); a
dirty step is re-run with every count on (:mod:`.replay` re-runs it, the
instrument measures the re-run). :class:`NonfiniteCheck` holds the mode and
decides; :func:`reproduced` says whether a re-run showed the step's own
non-finite values. With ``nonfinite="every_step"`` (or after a step that
could not be replayed) every module's flags are read at every step, and
exact counts from the step after the first non-finite one.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from ..step import stats
from ..step.collector import Collector, all_finite, host_finite
from ..step.slots import Key

__all__ = ["NonfiniteCheck", "reproduced", "scaler_decides"]

def scaler_decides(scaler, optimizer) -> bool:
    """An enabled GradScaler on CUDA reads its found-inf flag itself: the
    optimizer's pre-hook then runs only for a step without inf/NaN
    gradients, and the check needs no synchronisation of its own."""
    scale = getattr(scaler, "_scale", None) if scaler is not None else None
    return (
        optimizer is not None
        and scale is not None
        and getattr(scaler, "_enabled", False)
        and scale.device.type == "cuda"
    )


class NonfiniteCheck:
    """How non-finite values are found: ``mode`` is ``config.nonfinite``
    until a step cannot be replayed ("every_step" from then on); ``exact``
    turns on exact counts in the hooks (every_step: from the step after the
    first non-finite one; always during a replay); ``replays`` counts the
    steps re-run."""

    def __init__(self, mode: str):
        self.mode = mode
        self.exact = False
        self.replays = 0
        self._warned_fallback = False
        # every_step on CUDA: the previous step's host copy, checked at the next commit.
        self._unchecked_host: list | None = None

    @staticmethod
    def is_dirty(parts: list[Collector], loss: torch.Tensor | None) -> bool:
        """Whether the step's values (``parts``) or its loss hold a
        non-finite value: one stacked read per device (see
        :func:`.collector.all_finite`)."""
        for c in parts:
            c.compact()  # stacked once, for this check and the commit
        return not all_finite(parts, [loss] if loss is not None else [])

    def fall_back(self, step: int, why: str) -> None:
        """From the next step on, every module's non-finite flags at every
        step, exact counts (a non-finite value was just seen); warned once."""
        self.mode = "every_step"
        self.exact = True
        if not self._warned_fallback:
            self._warned_fallback = True
            msg = (
                f"tb_neuraldbg: step {step} has non-finite values but cannot be replayed to find "
                f"where they come from ({why}); measuring every module's non-finite values at every "
                f"step from now on"
            )
            warnings.warn(msg, RuntimeWarning, stacklevel=5)

    def note_nonfinite(self, host: list) -> None:
        """nonfinite="every_step": exact counts from the step after the
        first one with a non-finite value, read here from the step's host
        copy (on CUDA the previous step's, whose copy is done by now: no
        wait on this step's work), so the switch depends on the data only."""
        if self.exact:
            return
        pending, self._unchecked_host = self._unchecked_host, None
        if pending is not None:
            for p in pending:
                if isinstance(p, tuple):
                    p[1].synchronize()
            if not all(np.isfinite(p[0].numpy() if isinstance(p, tuple) else p).all() for p in pending):
                self.exact = True
                return
        ok = host_finite(host)
        if ok is None:
            self._unchecked_host = host
        elif not ok:
            self.exact = True


def reproduced(
    step_loss: torch.Tensor | None,
    loss: torch.Tensor | None,
    step_norms: tuple[list, object] | None,
    params: list,
    grads: list,
    rows_of: dict[int, int],
    col: Collector,
    scale: torch.Tensor | None,
) -> str | None:
    """None when a re-run gave the same parameters non-finite gradients as
    the step (``step_norms``: the parameters it measured and their norms)
    and the same loss, finite or not; else why not. Adds the exact counts of
    the re-run's gradients (``grads`` of ``params``) to ``col``, by row
    (``rows_of``: id(parameter) -> row). ``scale``: the GradScaler's, which
    the re-run's gradients carry."""
    if step_loss is not None and loss is not None:
        if bool(torch.isfinite(step_loss.float()).all()) != bool(torch.isfinite(loss.float()).all()):
            return "the replay's loss differs from the step's"
    if step_norms is None:
        return None
    if not grads:
        return "no gradient of the model's output was kept (a loss computed from more than the model's output?)"
    gparams, norms = step_norms
    replayed = {id(p): g for p, g in zip(params, grads)}
    again = [replayed.get(id(p)) for p in gparams]
    if any(g is None for g in again):
        return "the replay's backward reached other parameters"
    if isinstance(norms, torch.Tensor):
        was = torch.isfinite(norms.float())
    else:
        was = torch.isfinite(torch.stack([n.float().cpu() for n in norms]))
    again = [g.detach() for g in again]  # (norms as the step took them: the same rounding)
    now = stats.stacked_norms(again) if scale is None else stats.unscaled_norms(again, scale)
    now = torch.isfinite(now.float() if isinstance(now, torch.Tensor) else torch.stack([n.float() for n in now]))
    if not torch.equal(was.cpu(), now.cpu()):
        return "the replay's gradients differ from the step's (another RNG, a nondeterministic op?)"
    col.add_many([stats.nonfinite_count(g) for g in again], [rows_of[id(p)] for p in gparams], Key.GRAD_NF)
    return None
