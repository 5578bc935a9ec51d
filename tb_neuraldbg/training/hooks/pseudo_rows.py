"""What a step measures of its pseudo-layers: the batch (``<input>``), the loss (``<loss>``), the optimizer (``<optimizer>``).

Functions of their arguments, called once a step by the instrument (its
input and loss hooks, its commit); the values go to the step's
:class:`~.collector.Collector`.
"""

from __future__ import annotations

import torch
from torch import nn

from ..modules import first_tensor, not_dense
from ..step import stats
from ..step.collector import Collector
from ..step.slots import Key

__all__ = ["batch_tensor", "measure_batch", "measure_empty_batch", "classes_of", "add_step_scalars",
           "target_variance", "squashing_of", "target_range"]

_LOSS_KEYS = (Key.VALUE, Key.OUT_SUM)  # the loss row's: its value, and the sum that flags a non-finite one
_INT_PROBE = 1 << 16  # values of a floating-point batch read to tell whether it holds only integers


def batch_tensor(args, kwargs) -> torch.Tensor | None:
    """The model's first tensor argument (positional, else keyword): the
    batch; None when there is none to measure (complex, sparse or another
    layout that is not dense, or empty)."""
    x = first_tensor(args) if args else None
    if x is None:
        x = first_tensor(kwargs)
    if x is None or not_dense(x) is not None or x.is_complex() or x.numel() == 0:
        return None
    return x


def measure_batch(col: Collector, x: torch.Tensor, full: bool, exact: bool) -> None:
    """Every step min, max, sum and norm of the batch ``x`` (a bad batch is
    found at its step); its zero count on ``full`` steps; its exact
    non-finite count with ``exact``; its size and batch size."""
    xf = stats.float_view(x)
    acc = stats.acc_dtype(xf)
    mn, mx = torch.aminmax(xf)
    col.add(mn, 0, Key.OUT_MIN)
    col.add(mx, 0, Key.OUT_MAX)
    col.add(xf.sum(dtype=acc), 0, Key.OUT_SUM)
    col.add(torch.linalg.vector_norm(xf, dtype=acc), 0, Key.OUT_NORM)
    if full:
        col.add(stats.nonzero_count(xf), 0, Key.OUT_NZ)
        # integers are ids or indices, not features (the diagnosis does not
        # judge their scale): by the dtype, or floats that hold only integers
        if x.is_floating_point():
            # (its first values: ids or pixel values are integers throughout,
            # and an image batch need not be read whole for that)
            head = xf.reshape(-1)[:_INT_PROBE]
            col.add(torch.eq(head, torch.round(head)).all().to(torch.float32) * 0.5, 0, Key.INT_INPUT)
        else:
            col.const(0, Key.INT_INPUT, 1.0)
        if x.dim() >= 2 and x.shape[0] >= 2:  # whether the batch's samples differ (sample_spread)
            col.add(stats.sample_sums_norm(xf), 0, Key.SAMPLE_SUMS)
            col.const(0, Key.SAMPLES, x.shape[0])
    if exact:
        col.add(stats.nonfinite_count(x), 0, Key.OUT_NF)
    col.const(0, Key.OUT_N, x.numel())
    if x.dim() >= 1:
        col.const(0, Key.VALUE, x.shape[0])  # the batch size, for the diagnosis (dead units need samples)


def measure_empty_batch(col: Collector, args, kwargs) -> None:
    """A batch with no elements (``batch_tensor`` gave none to measure): its
    batch size, 0 where the batch is empty, which the diagnosis names in the
    message of the NaN loss a mean over it gives
    (``tests/test_empty_batch.py``)."""
    x = first_tensor(args) if args else None
    if x is None:
        x = first_tensor(kwargs)
    if x is not None and x.dim() >= 1 and not_dense(x) is None and x.numel() == 0:
        col.const(0, Key.VALUE, x.shape[0])


def classes_of(criterion: nn.Module, args) -> int | None:
    """K of a mean-reduced K-class cross-entropy (the logits' class
    dimension), whose initial loss is ln K; None for any other criterion
    (a "sum" reduction scales the initial loss by the batch size)."""
    if not isinstance(criterion, (nn.CrossEntropyLoss, nn.NLLLoss)):
        return None
    if getattr(criterion, "reduction", "mean") != "mean":
        return None
    logits = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if logits is None or logits.dim() < 1:
        return None
    return int(logits.shape[1] if logits.dim() >= 2 else logits.shape[0])


def squashing_of(criterion) -> str | None:
    """The squashing a criterion applies to its input itself, recorded on
    the ``<loss>`` layer as ``"squash"``: ``"softmax"`` (CrossEntropyLoss's
    log-softmax) or ``"sigmoid"`` (BCEWithLogitsLoss's and
    MultiLabelSoftMarginLoss's log-sigmoid); None for any other criterion and
    for one whose weights or reduction move the floor of a loss fed values
    in [0, 1] (the diagnosis' ``Loss.squash_floor``)."""
    if not isinstance(criterion, nn.Module) or getattr(criterion, "reduction", "mean") != "mean":
        return None
    if getattr(criterion, "weight", None) is not None or getattr(criterion, "pos_weight", None) is not None:
        return None
    if isinstance(criterion, nn.CrossEntropyLoss):
        return "softmax"
    if isinstance(criterion, (nn.BCEWithLogitsLoss, nn.MultiLabelSoftMarginLoss)):
        return "sigmoid"
    return None


def target_variance(criterion: nn.Module, args) -> torch.Tensor | None:
    """The variance of a mean-reduced ``MSELoss``'s targets (per output, over
    the batch, averaged; on their device): the loss of predicting their
    mean, which a regression that learns nothing settles at. None for other
    criteria and targets."""
    y = _regression_targets(criterion, args)
    if y is None:
        return None
    with torch.no_grad():
        return y.detach().float().var(dim=0).mean()


def _regression_targets(criterion: nn.Module, args) -> torch.Tensor | None:
    """The targets of a mean-reduced ``MSELoss`` (floating point, a batch
    of at least two); None for other criteria and targets."""
    if type(criterion) is not nn.MSELoss or getattr(criterion, "reduction", "mean") != "mean" or len(args) < 2:
        return None
    y = args[1]
    if not isinstance(y, torch.Tensor) or not y.is_floating_point() or y.dim() < 1 or y.shape[0] < 2:
        return None
    return y


def target_range(criterion: nn.Module, args) -> torch.Tensor | None:
    """The smallest and largest of a mean-reduced ``MSELoss``'s targets (a
    tensor of two, on their device; the criteria and targets of
    ``target_variance``): the range the model's output must be able to
    reach. None otherwise."""
    y = _regression_targets(criterion, args)
    if y is None:
        return None
    with torch.no_grad():
        return torch.stack(torch.aminmax(y.detach().float()))


def add_step_scalars(col: Collector, loss: torch.Tensor | None, optimizer, scaler, loss_row: int, opt_row: int) -> None:
    """The loss (its value, and its sum: the non-finite flag) in
    ``loss_row``; the learning rate of the first param group and the
    GradScaler's scale in ``opt_row``."""
    if loss is not None:
        loss = loss.float()
        loss = loss if loss.numel() == 1 else loss.mean()
        if type(loss) is torch.Tensor and loss.is_cpu:
            # Read now (no device to wait for): on a cheap step it is the
            # step's one device value, and its stack at the step's end
            # would cost more than this read.
            value = loss.item()
            col.measured(loss_row, _LOSS_KEYS, (value, value))
        else:
            col.add(loss, loss_row, Key.VALUE)
            col.add(loss, loss_row, Key.OUT_SUM)
    if optimizer is not None and optimizer.param_groups:
        lr = optimizer.param_groups[0].get("lr")
        if isinstance(lr, torch.Tensor):
            col.add(lr.detach().float(), opt_row, Key.VALUE)
        elif lr is not None:
            col.const(opt_row, Key.VALUE, float(lr))
    if scaler is not None and getattr(scaler, "_scale", None) is not None and getattr(scaler, "_enabled", True):
        # Concatenated before scaler.update() changes it in place.
        col.add(scaler._scale.detach().float(), opt_row, Key.SCALE)
