"""Check 1: the loss at initialisation against ln(K), the loss of uniform
predictions over K classes."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ._harness import CheckResult, Preserved, loss_of

__all__ = ["InitialLossResult", "initial_loss"]


@dataclass(frozen=True)
class InitialLossResult(CheckResult):
    """The loss at init, what chance predicts and the tolerance used."""

    loss: float
    expected: float  # ln K (ln 2 per output for binary cross-entropy)
    tolerance: float
    num_classes: int | None


_CE_LOSSES = (nn.CrossEntropyLoss, nn.NLLLoss)
_BINARY_LOSSES = (nn.BCEWithLogitsLoss,)


def _num_classes(logits: torch.Tensor, targets) -> int:
    # CrossEntropyLoss puts classes in dim 1 for [N, C, d1, ...] inputs with
    # index targets [N, d1, ...]; otherwise the last dim holds them.
    if (
        logits.dim() > 2
        and isinstance(targets, torch.Tensor)
        and not targets.is_floating_point()
        and tuple(targets.shape) == (logits.shape[0], *logits.shape[2:])
    ):
        return int(logits.shape[1])
    return int(logits.shape[-1])


def initial_loss(
    model: nn.Module, batch, targets, criterion, num_classes: int | None = None
) -> InitialLossResult:
    """Loss at initialisation against ln(K), K-class cross-entropy with
    uniform predictions.

    K is ``num_classes`` or the logits' class dimension (the last one, or dim 1
    for ``[N, C, d1, ...]`` logits with index targets). With
    ``nn.BCEWithLogitsLoss`` every output is a two-class problem: ln 2.
    ok when ``|loss - ln K| <= 0.5 + 0.25 * ln K`` (1.08 for K = 10, 1.65 for
    K = 100): default initialisations land well inside (logits near zero),
    over-scaled logits (a x50 last layer, missing softmax temperature) or a
    head initialised to large values do not. Loss criteria that are not a
    cross-entropy (an ``nn.Module`` other than CrossEntropyLoss, NLLLoss,
    BCEWithLogitsLoss) are reported ok and skipped. Runs under ``no_grad``.
    """
    with Preserved(model), torch.no_grad():
        out, loss = loss_of(model, batch, targets, criterion)
    value = float(loss)
    if isinstance(criterion, nn.Module) and not isinstance(criterion, _CE_LOSSES + _BINARY_LOSSES):
        return InitialLossResult(
            "initial_loss", True,
            f"skipped: {type(criterion).__name__} is not a cross-entropy, so ln(K) does not apply "
            f"(loss at init {value:.4g}).",
            value, math.nan, math.nan, None,
        )
    if isinstance(criterion, _BINARY_LOSSES):
        k, expected = 2, math.log(2.0)
    else:
        k = int(num_classes) if num_classes is not None else _num_classes(out, targets)
        if k < 2:
            raise ValueError(f"need at least 2 classes for cross-entropy, got K={k}; pass num_classes")
        expected = math.log(k)
    tol = 0.5 + 0.25 * expected
    ok = math.isfinite(value) and abs(value - expected) <= tol
    msg = _message(value, expected, tol, k, ok)
    return InitialLossResult("initial_loss", ok, msg, value, expected, tol, k)


def _message(value: float, expected: float, tol: float, k: int, ok: bool) -> str:
    what = f"loss at init {value:.4g}, expected ln({k}) = {expected:.4g} +/- {tol:.3g}"
    if ok:
        return f"{what}: predictions start near uniform, as they should."
    if not math.isfinite(value):
        return f"{what}: the loss is not finite at init; run find_nonfinite to locate the layer."
    if value > expected:
        return (
            f"{what}: the model starts confidently wrong. Logits are too large: scale down the "
            "last layer's init (e.g. weights x0.01, zero bias), remove extra scaling of the "
            "logits, check inputs are normalised and that the loss gets logits, not probabilities."
        )
    return (
        f"{what}: the loss is lower than chance before any training. Check for label "
        "leakage into the inputs, the number of classes, and the loss reduction."
    )
