"""The torch optimizer (and GradScaler) behind the wrappers training frameworks hand out.

accelerate's ``AcceleratedOptimizer`` subclasses ``torch.optim.Optimizer``
without calling its constructor (so it has no hook registry), Lightning's
``LightningOptimizer`` keeps the real one in ``_optimizer``, and ZeRO-style
wrappers expose ``.optimizer``. ``watch()`` hooks the innermost real
optimizer, whose ``step()`` every wrapper ends up calling, and takes the
GradScaler a wrapper carries (accelerate's ``.scaler``) when the user gave
none.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["unwrap_optimizer"]

# Attribute names under which known wrappers keep the wrapped optimizer.
_INNER = ("optimizer", "_optimizer")
_MAX_DEPTH = 8


def _is_hookable(opt: Any) -> bool:
    # A real torch optimizer: constructed through Optimizer.__init__, so it
    # has the registries register_step_pre_hook writes into.
    return isinstance(opt, torch.optim.Optimizer) and hasattr(opt, "_optimizer_step_pre_hooks")


def _inner(opt: Any):
    for name in _INNER:
        inner = getattr(opt, name, None)
        if inner is not None and inner is not opt and hasattr(inner, "param_groups"):
            return inner
    return None


def unwrap_optimizer(optimizer: Any, scaler: Any = None) -> tuple[Any, Any]:
    """``(optimizer, scaler)`` to hook: the innermost real torch optimizer
    inside ``optimizer``'s wrappers, and ``scaler`` or else the first
    enabled GradScaler a wrapper carries (``.scaler``).

    ``None`` passes through. Raises ``TypeError`` for an object that is no
    optimizer and wraps none.
    """
    if optimizer is None:
        return None, scaler
    opt = optimizer
    for _ in range(_MAX_DEPTH):
        if scaler is None:
            found = getattr(opt, "scaler", None)
            if found is not None and hasattr(found, "update") and getattr(found, "_enabled", True):
                scaler = found
        inner = _inner(opt)
        if inner is None or _is_hookable(opt):
            break  # a hookable optimizer (Lookahead-style too) is hooked itself
        opt = inner
    if not _is_hookable(opt):
        raise TypeError(
            f"watch(optimizer=...) needs a torch.optim.Optimizer or a wrapper of one "
            f"(exposing .optimizer), got {type(optimizer).__name__}"
        )
    return opt, scaler
