"""What the writer does with each module: one table by type, and the selection of rows.

Which modules become rows, and what is measured for each, comes from one
table looked up along the module's class hierarchy (the MRO), so that
subclasses inherit their parent's entry; a type listed nowhere on its MRO
gets ``Behaviour()``. :func:`register_module` teaches the table a type of
your own (a custom attention block, a bounded activation), like BackPACK's
``set_module_extension``; :func:`behaviour_of` reads it.

Also here: the wrapper levels that add no name (DataParallel, DDP,
torch.compile), the parameters each row owns, and the tensor finders that the
hooks and the preflight checks share.
"""

from __future__ import annotations

import fnmatch
import types
import warnings
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np
import torch
from torch import nn

__all__ = [
    "Behaviour",
    "MODULE_TABLE",
    "register_module",
    "behaviour_of",
    "select_modules",
    "select_added",
    "owned_params",
    "first_tensor",
    "iter_tensors",
    "not_dense",
    "unwrap",
    "is_compiled",
    "is_loss_module",
    "loss_modules",
    "loss_of_output",
]


@dataclass(frozen=True)
class Behaviour:
    """What to do with a module of a given type.

    watch: watched by default (False for modules that only move data around).
    atomic: the module does its work without calling its children as modules
        (``nn.MultiheadAttention`` never calls ``out_proj``): its children are
        not rows of their own and their parameters belong to it.
    dead: the dead-unit fraction of the output is meaningful (exact zeros).
    saturation: ``module -> (lo, hi)``: outputs ``<= lo`` or ``>= hi`` are in
        the flat part of a bounded activation; ``lo=None``: only the top end
        counts (ReLU6, Hardtanh(0, ...): the zeros are the dead side).
    pointwise: an elementwise activation without parameters that maps finite
        values to finite values. On cheap steps, when its input is the
        previous row's output, it is not measured again: its non-finite flag
        is its input's.
    """

    watch: bool = True
    atomic: bool = False
    dead: bool = False
    saturation: Callable[[nn.Module], tuple[float | None, float]] | None = None
    pointwise: bool = False

    def __post_init__(self):
        for name in ("watch", "atomic", "dead", "pointwise"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"Behaviour.{name} must be a bool, got {getattr(self, name)!r}")
        if self.saturation is not None and not callable(self.saturation):
            raise TypeError(
                "Behaviour.saturation must be a function module -> (lo, hi) or None, "
                f"got {type(self.saturation).__name__}"
            )


_SKIP = Behaviour(watch=False)


def _hardtanh_bounds(m: nn.Module) -> tuple[float | None, float]:
    lo, hi = float(m.min_val), float(m.max_val)
    # A 0 lower bound is a clipped ReLU: its zeros are dead, not saturated.
    return (None if lo == 0 else lo), hi


_TABLE: dict[type, Behaviour] = {
    nn.Identity: _SKIP,
    nn.Dropout: _SKIP,
    nn.Dropout1d: _SKIP,
    nn.Dropout2d: _SKIP,
    nn.Dropout3d: _SKIP,
    nn.AlphaDropout: _SKIP,
    nn.FeatureAlphaDropout: _SKIP,
    nn.Flatten: _SKIP,
    nn.Unflatten: _SKIP,
    # A loss module kept in the model (``self.crit = nn.CrossEntropyLoss()``)
    # is the <loss> row, never a layer: its scalar output is no activation.
    # (torch's base class of every built-in loss.)
    nn.modules.loss._Loss: _SKIP,
    nn.MultiheadAttention: Behaviour(atomic=True),
    nn.RNNBase: Behaviour(atomic=True),
    nn.ReLU: Behaviour(dead=True, pointwise=True),
    nn.Threshold: Behaviour(dead=True, pointwise=True),
    nn.Hardswish: Behaviour(dead=True, pointwise=True),
    nn.Tanh: Behaviour(saturation=lambda m: (-0.99, 0.99), pointwise=True),
    nn.Softsign: Behaviour(saturation=lambda m: (-0.99, 0.99), pointwise=True),
    nn.Sigmoid: Behaviour(saturation=lambda m: (0.01, 0.99), pointwise=True),
    nn.Hardsigmoid: Behaviour(saturation=lambda m: (0.0, 1.0), pointwise=True),
    nn.Hardtanh: Behaviour(saturation=_hardtanh_bounds, pointwise=True),
    nn.ReLU6: Behaviour(dead=True, saturation=lambda m: (None, 6.0), pointwise=True),
    **{
        cls: Behaviour(pointwise=True)
        for cls in (
            nn.LeakyReLU, nn.ELU, nn.SELU, nn.CELU, nn.GELU, nn.SiLU, nn.Mish, nn.Softplus,
            nn.LogSigmoid, nn.Tanhshrink, nn.Softshrink, nn.Hardshrink,
        )
    },
}

#: The table, read-only: ``{module type: Behaviour}``. Add to it with
#: :func:`register_module`.
MODULE_TABLE: Mapping[type, Behaviour] = types.MappingProxyType(_TABLE)


def register_module(cls: type, behaviour: Behaviour, *, overwrite: bool = False) -> None:
    """Teach the writer what a module type does: ``cls`` and its subclasses
    get ``behaviour`` (unless a subclass has an entry of its own).

    A type that already has an entry (a built-in one such as ``nn.GELU``, or
    one registered before) is only replaced with ``overwrite=True``. Models
    watched afterwards see the entry; a model already watched keeps what it
    was watched with.

        register_module(MyAttention, Behaviour(atomic=True))   # one row, owns its children's weights
        register_module(Clamp01, Behaviour(saturation=lambda m: (0.0, 1.0), pointwise=True))
    """
    if not isinstance(cls, type) or not issubclass(cls, nn.Module):
        raise TypeError(f"register_module() needs an nn.Module subclass, got {cls!r}")
    if cls is nn.Module:
        raise ValueError("register_module(nn.Module, ...) would apply to every module; register your own type")
    if not isinstance(behaviour, Behaviour):
        raise TypeError(
            f"register_module() needs a Behaviour (from tb_neuraldbg import Behaviour), got {type(behaviour).__name__}"
        )
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be a bool, got {overwrite!r}")
    old = _TABLE.get(cls)
    if old is not None and not overwrite:
        raise ValueError(
            f"{cls.__qualname__} already has a Behaviour ({old}); pass overwrite=True to replace it"
        )
    _TABLE[cls] = behaviour


def behaviour_of(module: nn.Module | type) -> Behaviour:
    """The entry for a module (or a module type): its class's own, or its
    nearest base class's, or ``Behaviour()`` when none is listed."""
    for cls in (module if isinstance(module, type) else type(module)).__mro__:
        b = _TABLE.get(cls)
        if b is not None:
            return b
    return Behaviour()


# --------------------------------------------------------------------------
# Module selection and names
# --------------------------------------------------------------------------

_WRAPPERS = (nn.DataParallel, nn.parallel.DistributedDataParallel)


def is_compiled(m: nn.Module) -> bool:
    """True for torch.compile's wrapper of a module (``OptimizedModule``)."""
    return type(m).__name__ == "OptimizedModule" and isinstance(getattr(m, "_orig_mod", None), nn.Module)


def _is_wrapper(m: nn.Module) -> bool:
    return isinstance(m, _WRAPPERS) or is_compiled(m)


def unwrap(model: nn.Module) -> nn.Module:
    """The user's model inside DataParallel / DDP (``.module``) and
    torch.compile (``._orig_mod``) wrappers, so names match the user's."""
    while _is_wrapper(model):
        model = model.module if isinstance(model, _WRAPPERS) else model._orig_mod
    return model


def _walk(module: nn.Module, prefix: str, seen: set):
    """(name, module) depth first; wrapper levels add no name segment."""
    if id(module) in seen:
        return
    seen.add(id(module))
    yield prefix, module
    if behaviour_of(module).atomic:
        return
    skip = _is_wrapper(module)
    for name, child in module.named_children():
        yield from _walk(child, prefix if skip else (f"{prefix}.{name}" if prefix else name), seen)


def _does_work(m: nn.Module) -> bool:
    # A leaf computes; a composite computes itself when it has parameters of
    # its own or the table says its children are part of it. Other
    # composites (Sequential, TransformerEncoderLayer, user blocks) are
    # containers: their children are the rows.
    if _is_wrapper(m):
        return False
    b = behaviour_of(m)
    return b.atomic or next(m.children(), None) is None or next(m.parameters(recurse=False), None) is not None


def _matches(name: str, module: nn.Module, patterns) -> bool:
    for p in patterns:
        if isinstance(p, type):
            if isinstance(module, p):
                return True
        elif fnmatch.fnmatchcase(name, str(p)):
            return True
    return False


def _as_list(x) -> list:
    if x is None:
        return []
    if isinstance(x, (str, type)):
        return [x]
    return list(x)


def _select(root: nn.Module, prefix: str, include, exclude):
    """(qualified name, module) of the working modules under ``root``, named
    under ``prefix``, by the rules of :func:`select_modules`."""
    include, exclude = _as_list(include), _as_list(exclude)
    for rel, m in _walk(root, "", set()):
        if not _does_work(m):
            continue
        if prefix:
            name = f"{prefix}.{rel}" if rel else prefix
        else:
            name = rel or type(m).__name__  # the model itself is a single layer
        if include:
            if not _matches(name, m, include):
                continue
        elif not behaviour_of(m).watch:
            continue
        if exclude and _matches(name, m, exclude):
            continue
        yield name, m


def select_modules(model: nn.Module, include=None, exclude=None, max_layers: int | None = None):
    """The modules to watch, as ``[(name, module)]`` in definition order.

    Default: every module that does work itself (see ``_does_work``), minus
    the table's skipped types (Dropout, Identity, Flatten). ``include``: name
    patterns (fnmatch, e.g. ``"encoder.layers.*"``) or module types; only
    matching working modules are watched (skipped types too, when named).
    ``exclude``: the same, removed afterwards. Above ``max_layers`` modules an
    evenly spaced subset is kept (first and last included) with a warning.
    """
    found = list(_select(unwrap(model), "", include, exclude))
    if max_layers is not None and len(found) > max_layers:
        keep = sorted(set(np.linspace(0, len(found) - 1, max_layers).round().astype(int).tolist()))
        warnings.warn(
            f"tb_neuraldbg: the model has {len(found)} modules to watch; watching "
            f"{len(keep)} evenly spaced ones (max_layers={max_layers}). Choose with "
            f"watch(include=..., exclude=...) or raise max_layers.",
            stacklevel=3,
        )
        found = [found[i] for i in keep]
    return found


def is_loss_module(m: nn.Module) -> bool:
    """True for torch's loss modules (every ``nn.*Loss``) and their subclasses."""
    return isinstance(m, nn.modules.loss._Loss)


def loss_modules(model: nn.Module) -> list[nn.Module]:
    """The loss modules kept inside ``model``, in definition order."""
    return [m for m in unwrap(model).modules() if is_loss_module(m)]


def loss_of_output(output):
    """The loss a model computed itself, from its output: a ``loss`` entry
    or attribute that is a tensor (Hugging Face ``ModelOutput``s, dicts); None
    when there is none."""
    loss = None
    if isinstance(output, dict):
        loss = output.get("loss")
    if loss is None:
        loss = getattr(output, "loss", None)
    return loss if isinstance(loss, torch.Tensor) else None


def select_added(name: str, module: nn.Module, include=None, exclude=None) -> list:
    """The rows of ``module``, added to a watched model as ``name`` after
    watch(): ``[(qualified name, module)]`` by :func:`select_modules`' rules
    with ``include``/``exclude`` matched against the full names."""
    return list(_select(module, name, include, exclude))


def owned_params(m: nn.Module) -> list[nn.Parameter]:
    """The parameters a watched module's row owns: its whole subtree's for a
    leaf or an atomic module, its own otherwise (a container's children are
    rows of their own). Frozen ones too: a backbone unfrozen after
    ``watch()`` is followed from then on (each step's layout keeps those
    that require grad now: ``hooks/params.py``; tests/test_watch_robust.py)."""
    recurse = behaviour_of(m).atomic or next(m.children(), None) is None
    return list(m.parameters(recurse=recurse))


# --------------------------------------------------------------------------
# Tensors in arguments and outputs
# --------------------------------------------------------------------------


def iter_tensors(*objs, depth: int = 0):
    """Every tensor in (nested) argument structures."""
    for obj in objs:
        if isinstance(obj, torch.Tensor):
            yield obj
        elif depth < 4 and isinstance(obj, (list, tuple)):
            yield from iter_tensors(*obj, depth=depth + 1)
        elif depth < 4 and isinstance(obj, dict):
            yield from iter_tensors(*obj.values(), depth=depth + 1)


_STRIDED = torch.strided


def not_dense(t: torch.Tensor) -> str | None:
    """None for an ordinary dense tensor, which the statistics can read;
    else what it is ("sparse_coo", "sparse_csr", ..., "nested", "quantized",
    "meta"), a tensor the hooks skip as they skip one that is not float
    (``tests/test_sparse_outputs.py``: torch's reductions refuse it)."""
    if t.layout is not _STRIDED:
        return str(t.layout).replace("torch.", "")
    if t.is_nested:
        return "nested"
    if t.is_quantized:
        return "quantized"
    if t.is_meta:
        return "meta"
    return None


def first_tensor(obj, depth: int = 0):
    """First tensor in a (nested) output/argument structure, depth first."""
    if isinstance(obj, torch.Tensor):
        return obj
    if type(obj) is tuple and obj and isinstance(obj[0], torch.Tensor):
        return obj[0]  # the common case: forward(x, ...)
    if depth > 4:
        return None
    if isinstance(obj, (list, tuple)):
        items = obj
    elif isinstance(obj, dict):
        items = obj.values()
    else:
        return None
    for o in items:
        t = first_tensor(o, depth + 1)
        if t is not None:
            return t
    return None
