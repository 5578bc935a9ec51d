"""The preflight protocol: quick checks to run before a long training job.

Each check is a plain function that returns a small frozen result with
``ok`` (bool) and ``message`` (what was found and what to try). The checks
train or probe the model for a few steps, then put everything back: parameter
values, buffers (BatchNorm running statistics included), ``.grad`` tensors,
train/eval flags and the torch RNG state (CPU and every initialised CUDA
device) are restored bitwise, in place, so the user's optimizer still holds
the same parameter objects. Every hook is removed, also when the model
raises. Checks run on whatever device the model and batch live on.

A ``batch`` is what the model is called with: a tensor (``model(batch)``),
a tuple or list (``model(*batch)``) or a dict (``model(**batch)``).

    from tb_neuraldbg import checks
    results = checks.run_preflight(model, x, y, nn.CrossEntropyLoss())
    print(checks.format_results(results))

One file per check, each with its result class: ``initial_loss``,
``overfit``, ``lr_range``, ``clipping``, ``nonfinite``, ``units`` (dead and
saturated units); ``preflight`` runs the cheap ones in order and formats the
results; ``_harness`` holds what they share (the snapshot that restores the
model, the hook owner, batch and step helpers).
"""

from __future__ import annotations

from ._harness import CheckResult
from .clipping import ClippingResult, gradient_clipping_advice
from .initial_loss import InitialLossResult, initial_loss
from .lr_range import LRRangeResult, lr_range_test
from .nonfinite import NonfiniteResult, find_nonfinite
from .overfit import OverfitResult, overfit_single_batch
from .preflight import format_results, run_preflight
from .units import LayerUnits, UnitsResult, dead_and_saturated_units

__all__ = [
    "CheckResult",
    "InitialLossResult",
    "OverfitResult",
    "LRRangeResult",
    "ClippingResult",
    "NonfiniteResult",
    "LayerUnits",
    "UnitsResult",
    "initial_loss",
    "overfit_single_batch",
    "lr_range_test",
    "gradient_clipping_advice",
    "find_nonfinite",
    "dead_and_saturated_units",
    "run_preflight",
    "format_results",
]
