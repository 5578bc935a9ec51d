"""What a DebugWriter says before training starts, in one line each: a
log_dir that cannot be a run directory, an optimizer that trains none of
the watched model (tests/test_writer_checks.py decides)."""

from __future__ import annotations

import os
import warnings

from .. import distributed

__all__ = ["log_dir_problem", "check_optimizer"]



def log_dir_problem(log_dir) -> str | None:
    """Why a local ``log_dir`` cannot be a run directory (it is a file, or
    lies under one), said in one line before TensorBoard's writer fails on
    it with a traceback from deep inside; None when it can."""
    if not log_dir or "://" in str(log_dir):
        return None
    path = os.path.abspath(os.path.expanduser(os.fspath(log_dir)))
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent
    if os.path.isdir(path):
        return None
    return f"log_dir {os.fspath(log_dir)!r} is not a directory: {path} is a file"


def check_optimizer(model, optimizer, stacklevel: int = 3) -> None:
    """Warn when ``optimizer`` holds none of ``model``'s trainable
    parameters (built for another model, or before the model was rebuilt):
    then nothing of this model trains, which the report would say only
    after steps of it. ``stacklevel``: the user's frame (watch()'s caller)."""
    groups = getattr(optimizer, "param_groups", None)
    if not groups:
        return
    try:
        held = {id(p) for g in groups for p in g.get("params", ())}
        trainable = [p for p in model.parameters() if p.requires_grad]
    except Exception:  # noqa: BLE001 -- an optimizer of an unusual shape: no check
        return
    if trainable and not any(id(p) in held for p in trainable):
        msg = (f"{distributed.tag()}: the optimizer holds none of the watched model's {len(trainable)} "
               "trainable parameters (built for another model, or before the model was rebuilt or "
               "copied?): its steps will not train this model")
        warnings.warn(msg, RuntimeWarning, stacklevel=stacklevel)
