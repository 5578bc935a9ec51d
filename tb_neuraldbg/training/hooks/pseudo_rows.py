"""What a step measures of its pseudo-layers: the batch (``<input>``), the loss (``<loss>``), the optimizer (``<optimizer>``).

Functions of their arguments, called once a step by the instrument (its
input and loss hooks, its commit); the values go to the step's
:class:`~.collector.Collector`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..modules import first_tensor, not_dense
from ..step import stats
from ..step.collector import Collector
from ..step.slots import Key

__all__ = ["batch_tensor", "measure_batch", "measure_empty_batch", "classes_of", "add_step_scalars",
           "target_variance", "squashing_of", "loss_layer_extras", "target_range", "recorded_loss",
           "LabelFrequencies", "target_facts", "without_loss_levels"]

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
    if xf.numel() >= 2:  # (its std from the norm loses a spread far below its offset: Key.OUT_STD)
        col.add(torch.std(xf if acc is None else xf.to(acc)), 0, Key.OUT_STD)
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
            col.add(stats.sums_norm(xf, 0), 0, Key.SAMPLE_SUMS)
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


#: criteria whose floating-point targets are probabilities: each in [0, 1]
#: (a class's share for CrossEntropyLoss, a label's for the binary ones),
#: where the loss is never below 0
_PROBABILITY_TARGETS = (nn.CrossEntropyLoss, nn.BCEWithLogitsLoss, nn.BCELoss, nn.MultiLabelSoftMarginLoss)


def loss_layer_extras(criterion) -> dict:
    """What the ``<loss>`` layer entry records of its criterion
    (docs/FORMAT.md): ``"squash"`` (``squashing_of``, None included), and
    ``"targets": "probabilities"`` for a criterion whose floating-point
    targets must each lie in [0, 1] (``target_range`` then records their
    range: labels in {-1, 1} or 0..255 fed to a binary cross-entropy, a
    CrossEntropyLoss given the logits as its target)."""
    extras = {"squash": squashing_of(criterion)}
    if isinstance(criterion, _PROBABILITY_TARGETS):
        extras["targets"] = "probabilities"
    return extras


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


class LabelFrequencies:
    """The loss of predicting the label frequencies seen so far for every
    sample (``prior_loss``, docs/FORMAT.md): the best a classifier can do
    without looking at its inputs, which one that learned nothing else settles
    at. The frequencies are counted over the run's targets (on their device),
    not over one batch: a small batch's histogram has too low an entropy (4
    labels of 4 classes), a run's does not (scenario mlp_relu_sgd_b4_w256_d6).

    For a mean-reduced ``CrossEntropyLoss`` without class weights, the entropy
    of the targets' class frequencies (class indices, ``ignore_index`` left
    out, with the Miller-Madow correction (m - 1) / 2N of a histogram's
    entropy; or class probabilities, averaged), after its ``label_smoothing``;
    for a mean-reduced ``BCEWithLogitsLoss`` without weights, the binary
    entropy of the mean of all its targets in [0, 1] (one rate for every
    output: never below the loss of each output's own rate, so never too
    low). None for other criteria and targets."""

    def __init__(self):
        self.sums: torch.Tensor | None = None  # targets summed per class (CE), or all of them (BCE: one value)
        self.count: torch.Tensor | None = None  # targets counted
        self.kind = None  # ("ce", K, hard) or ("bce",): a change starts the count again

    def add(self, criterion: nn.Module, args) -> torch.Tensor | None:
        """Count this batch's targets; the loss of the frequencies so far."""
        if len(args) < 2 or getattr(criterion, "reduction", "mean") != "mean":
            return None
        x, y = args[0], args[1]
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or not x.is_floating_point():
            return None
        with torch.no_grad():
            y = y.detach()
            if type(criterion) is nn.CrossEntropyLoss and criterion.weight is None and x.dim() >= 2:
                return self._classes(x.shape[1], y, criterion.ignore_index, criterion.label_smoothing)
            if (type(criterion) is nn.BCEWithLogitsLoss and criterion.weight is None
                    and criterion.pos_weight is None and y.is_floating_point() and y.numel() >= 1):
                return self._binary(y.float())
        return None

    def _start(self, kind, size: int, device) -> None:
        if self.kind != kind or self.sums is None or self.sums.device != device:
            self.kind = kind
            self.sums = torch.zeros(size, dtype=torch.float64, device=device)
            self.count = torch.zeros((), dtype=torch.float64, device=device)

    def _classes(self, k: int, y: torch.Tensor, ignore: int, smoothing: float) -> torch.Tensor | None:
        hard = not y.is_floating_point()
        if hard:
            y = y.reshape(-1)
            # (weights, not a boolean index: no wait for the device)
            valid = ((y != ignore) & (y >= 0) & (y < k)).double()
            add = torch.bincount(y.clamp(0, k - 1), weights=valid, minlength=k)[:k]
            n = valid.sum()
        elif y.dim() >= 2 and y.shape[1] == k:  # class probabilities [B, K, ...]
            p = y.double().transpose(0, 1).reshape(k, -1)
            add, n = p.sum(dim=1), p.shape[1]
        else:
            return None
        self._start(("ce", k, hard), k, y.device)
        self.sums += add
        self.count += n
        p = self.sums / self.count.clamp_min(1.0)
        correction = ((self.sums > 0).sum() - 1).double() / (2 * self.count) if hard and not smoothing else 0.0
        if smoothing:
            p = (1 - smoothing) * p + smoothing / k
        logp = torch.where(p > 0, p.clamp_min(1e-300).log(), torch.zeros_like(p))
        h = -(p * logp).sum() + correction
        return torch.where(self.count >= 2, h, torch.full_like(h, float("nan"))).float()

    def _binary(self, y: torch.Tensor) -> torch.Tensor:
        lo, hi = torch.aminmax(y)
        inside = (lo >= 0) & (hi <= 1)
        self._start(("bce",), 1, y.device)
        # (targets outside [0, 1] have no such floor, another rule's: not counted)
        self.sums += torch.where(inside, y.double().sum(), torch.zeros((), dtype=torch.float64, device=y.device))
        self.count += torch.where(inside, float(y.numel()), 0.0).double()
        rate = (self.sums[0] / self.count.clamp_min(1.0)).clamp(1e-12, 1 - 1e-12)
        h = -(rate * rate.log() + (1 - rate) * (1 - rate).log())
        return torch.where(inside & (self.count >= 2), h, torch.full_like(h, float("nan"))).float()


def target_facts(criterion: nn.Module, args, frequencies: LabelFrequencies) -> list[tuple[torch.Tensor, int]]:
    """(value, slot key) of what the <loss> row records of a criterion's
    targets on a full step: a regression's variance and range
    (``target_variance``, ``target_range``), a classifier's label frequencies'
    loss (``frequencies``, counted on)."""
    out = []
    var, span, prior = target_variance(criterion, args), target_range(criterion, args), frequencies.add(criterion, args)
    if var is not None:
        out.append((var, Key.TARGET_VAR))
    if span is not None:
        out += [(span[0], Key.TARGET_MIN), (span[1], Key.TARGET_MAX)]
    if prior is not None:
        out.append((prior, Key.PRIOR_LOSS))
    return out


#: what the <loss> row compares with the loss's value: a constant prediction's loss
_LOSS_LEVELS = (Key.TARGET_VAR, Key.PRIOR_LOSS)


def without_loss_levels(facts: list) -> list:
    """``facts`` (``target_facts``) without the losses a constant prediction
    gives (target_var, prior_loss), for a step whose recorded loss is not the
    criterion's own (``record(loss=...)`` gave a total of more terms: a VAE's
    KL added to its MSE): they are levels of the criterion's loss, not of
    that total. The targets' range still says whether they fit the criterion."""
    return [(v, k) for v, k in facts if k not in _LOSS_LEVELS]


def target_range(criterion: nn.Module, args) -> torch.Tensor | None:
    """The smallest and largest of a mean-reduced ``MSELoss``'s targets (a
    tensor of two, on their device; the criteria and targets of
    ``target_variance``): the range the model's output must be able to
    reach; or of the floating-point targets of a criterion that takes
    probabilities (``loss_layer_extras``), which must lie in [0, 1]. None
    otherwise."""
    y = _regression_targets(criterion, args)
    if y is None and isinstance(criterion, _PROBABILITY_TARGETS) and len(args) >= 2:
        y = args[1] if isinstance(args[1], torch.Tensor) and args[1].is_floating_point() else None
    if y is None or y.numel() == 0:
        return None
    with torch.no_grad():
        return torch.stack(torch.aminmax(y.detach().float()))


def recorded_loss(loss) -> torch.Tensor:
    """``record(loss=...)``'s loss as a detached tensor: a tensor, a number, a
    numpy value or array, a sequence of numbers; anything else raises
    ``TypeError``."""
    if isinstance(loss, torch.Tensor):
        return loss.detach()
    try:
        return torch.as_tensor(np.asarray(loss, dtype=np.float64).reshape(-1))
    except (TypeError, ValueError):
        raise TypeError(
            f"record(loss=...) takes a tensor, a number or a sequence of numbers, "
            f"not {type(loss).__name__} {str(loss)[:40]!r}"
        ) from None


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
