"""Check 4: total gradient norms over a few training steps, and a clip value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..training.step import stats
from ._harness import CheckResult, Preserved, adam, batches, train_steps, trainable

__all__ = ["ClippingResult", "gradient_clipping_advice"]


@dataclass(frozen=True)
class ClippingResult(CheckResult):
    """The observed gradient norms, a clip value and the steps that spiked."""

    norms: tuple[float, ...]  # total gradient 2-norm before each step
    suggested_clip: float | None  # the ``percentile``-th percentile of norms
    spikes: tuple[int, ...]  # steps whose norm exceeds spike_factor x median


def _total_norm(params: list[nn.Parameter]) -> torch.Tensor:
    """Total 2-norm of the gradients as a 0-d tensor, on the device."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    norms = stats.foreach_norm(grads)
    dev = norms[0].device
    return torch.linalg.vector_norm(torch.stack([n.to(dev, torch.float32) for n in norms]))


def gradient_clipping_advice(
    model: nn.Module,
    batch,
    targets,
    criterion,
    steps: int = 20,
    optimizer_factory: Callable = adam,
    percentile: float = 90.0,
    spike_factor: float = 5.0,
) -> ClippingResult:
    """Total gradient norms over a few training steps, and a clip value.

    Records the total 2-norm of all gradients before each of ``steps``
    optimizer steps (unclipped). ``suggested_clip`` is the ``percentile``-th
    percentile of those norms (linear interpolation, as ``torch.quantile``):
    clipping there leaves ordinary steps alone and caps outliers. A step is a
    spike when its norm exceeds ``spike_factor`` (5) x the median norm; ok
    when no step spikes and every norm is finite. Batches as in
    ``lr_range_test``. Weights are restored afterwards.
    """
    if steps < 1:
        raise ValueError("steps must be >= 1")
    params = [p for _, p in trainable(model)]
    norms_dev: list[torch.Tensor] = []
    with Preserved(model):
        opt = optimizer_factory(params)
        for loss, problem in train_steps(model, opt, criterion, batches(batch, targets), steps):
            if problem:
                msg = f"no gradients: {problem}"
                return ClippingResult("gradient_clipping_advice", False, msg, (), None, ())
            loss.backward()
            norms_dev.append(_total_norm(params))
            opt.step()
    norms_t = torch.stack([n.to(norms_dev[0].device) for n in norms_dev]).double().cpu()
    norms = tuple(norms_t.tolist())
    finite = torch.isfinite(norms_t)
    if not bool(finite.all()):
        bad = [i for i, f in enumerate(finite.tolist()) if not f]
        return ClippingResult(
            "gradient_clipping_advice", False,
            f"gradient norm not finite at step(s) {bad[:5]}: clipping cannot fix this; run "
            "find_nonfinite, lower the learning rate or use a GradScaler with AMP.",
            norms, None, tuple(bad),
        )
    clip = float(torch.quantile(norms_t, percentile / 100))
    median = float(norms_t.median())
    spikes = tuple(i for i, v in enumerate(norms) if v > spike_factor * median)
    ok = not spikes
    what = (
        f"grad norm over {len(norms)} steps: median {median:.3g}, max {max(norms):.3g}; "
        f"suggested clip_grad_norm_ max_norm = {clip:.3g} ({percentile:g}th percentile)"
    )
    if ok:
        msg = f"{what}. No spikes: clipping is optional."
    else:
        msg = (
            f"{what}. Spikes above {spike_factor:g}x the median at step(s) {list(spikes[:5])}: "
            "clip at the suggested value, lower the learning rate or add warmup."
        )
    return ClippingResult("gradient_clipping_advice", ok, msg, norms, clip, spikes)
