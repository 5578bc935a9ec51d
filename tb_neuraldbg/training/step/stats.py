"""The statistics: device-side reductions, called from hooks on the training thread.

Every function takes tensors and returns 0-d or 1-d tensors on the same
device, never a Python number, so nothing here waits for the device. The
formulations are the cheapest found with ``benchmarks/overhead.py``:
``aminmax``, ``sum`` and ``vector_norm`` (no temporaries), ``_foreach_norm``
for many tensors at once. Counts use ``x.bool().sum(dtype=int32)``:
``count_nonzero`` is several times slower on ReLU outputs (many zeros) on
the CPU, and so is an int64 sum of bools on large tensors. On the CPU,
reductions of small tensors run faster on one thread (waking the second
costs more than it saves): see :class:`one_thread`.

Their host-side completion into rows, and the slot keys (:class:`Key`) both
sides are written against, are in :mod:`.slots` (numpy only, for the worker);
the names are imported here too.
"""

from __future__ import annotations

import math
import warnings
from functools import partial
from operator import attrgetter
from typing import Sequence

import torch

from .slots import HIST_BINS, NONFINITE_EVIDENCE, Key, SlotLayout, assemble, assemble_steps, histogram_parts

__all__ = [
    "BACKEND",
    "Key",
    "flag_moment",
    "moments",
    "zero_and_dead",
    "saturated",
    "nonfinite_count",
    "nonzero_count",
    "unit_axis",
    "sums_norm",
    "l2_norm",
    "histogram",
    "foreach_norm",
    "stacked_norms",
    "unscaled_norms",
    "foreach_sub_",
    "rounded_away",
    "local_shard",
    "float_view",
    "acc_dtype",
    "ACC_DTYPE",
    "assemble",
    "assemble_steps",
    "SlotLayout",
    "histogram_parts",
    "one_thread",
    "one_thread_pays",
    "HIST_BINS",
    "NONFINITE_EVIDENCE",
    "SMALL",
    "GRAIN",
]

#: The statistics back end, as ``DebugWriter.stats_info()["statistics"]`` names it:
#: torch's own ops, on every device (nothing is compiled at run time).
BACKEND = "torch"

SMALL = 1 << 22  # elements: below this, CPU reductions go faster on one thread
GRAIN = 32768  # at::internal::GRAIN_SIZE: smaller ops never use a second thread


def one_thread_pays(*tensors: torch.Tensor | None) -> bool:
    """True when the instrumentation's reductions over ``tensors`` (None
    entries ignored) go faster on one intra-op thread: every one is a CPU
    tensor under ``SMALL`` elements, and one at least reaches ``GRAIN`` (torch
    runs smaller ops inline anyway: nothing to save). The one statement of
    the rule: :class:`one_thread` and the hooks (which switch inline, without
    a context manager, since they run for every module at every step) ask it.
    """
    # Sizes first: most hook calls stop there. ``is_cpu`` costs a tenth of
    # ``device.type`` (which builds a torch.device).
    big = False
    for t in tensors:
        if t is not None:
            n = t.numel()
            if n >= SMALL:
                return False
            big = big or n >= GRAIN
    if not big:
        return False
    for t in tensors:
        if t is not None and not t.is_cpu:
            return False
    return True


class one_thread:
    """Context: run torch ops on one intra-op thread when the tensors are
    small CPU tensors (``numel < SMALL``), restoring the setting on exit.

    Only for the instrumentation's own reductions, on the training thread
    between the user's ops: the user's ops always run with the user's
    setting. ``torch.set_num_threads`` itself is cheap.
    """

    __slots__ = ("n",)

    def __init__(self, *tensors: torch.Tensor | None, threads: int | None = None):
        # threads: the current torch.get_num_threads() if the caller knows it
        # (asking costs microseconds right after a parallel op).
        self.n = 0
        if not one_thread_pays(*tensors):
            return
        n = torch.get_num_threads() if threads is None else threads
        if n > 1:
            self.n = n

    def __enter__(self):
        if self.n:
            torch.set_num_threads(1)
        return self

    def __exit__(self, *exc):
        if self.n:
            torch.set_num_threads(self.n)
        return False


# --------------------------------------------------------------------------
# Device side
# --------------------------------------------------------------------------


def float_view(x: torch.Tensor) -> torch.Tensor:
    """``x`` itself if floating, else as float32: integer batches (token
    ids, labels) have statistics too, and reductions such as vector_norm need
    a floating dtype."""
    return x if x.is_floating_point() else x.to(torch.float32)


#: dtype -> the dtype its sums and norms accumulate in, where not its own:
#: half-precision sums overflow at 65504 and would read as a non-finite flag.
#: (A dict: the output-gradient hook reads it inline, ``ACC_DTYPE.get``.)
ACC_DTYPE: dict[torch.dtype, torch.dtype] = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def acc_dtype(x: torch.Tensor) -> torch.dtype | None:
    """The dtype to accumulate sums and norms of ``x`` in (see
    :data:`ACC_DTYPE`); None: ``x``'s own."""
    return ACC_DTYPE.get(x.dtype)


def flag_moment(x: torch.Tensor) -> torch.Tensor:
    """The sum of ``x``: gives the mean, and is non-finite iff ``x`` has a
    non-finite value (NaN and inf propagate; +inf and -inf give NaN), barring
    an overflow of the float sum itself. The cheapest every-step check."""
    x = float_view(x)
    return x.sum(dtype=acc_dtype(x))


def moments(x: torch.Tensor, dead: bool = False) -> list[torch.Tensor]:
    """[min, max, sum, L2 norm, count of non-zeros] of ``x`` as 0-d tensors,
    and with ``dead=True`` (``x`` batched, dim 0 the batch) a sixth value:
    the count of dead units (see :func:`zero_and_dead`).

    From them, on the host: mean, std, max |x| and the zero fraction
    (see :func:`assemble`). Four reductions, no temporaries.
    """
    x = float_view(x)
    acc = acc_dtype(x)
    mn, mx = torch.aminmax(x)
    out = [mn, mx, x.sum(dtype=acc), torch.linalg.vector_norm(x, dtype=acc)]
    if dead:
        out.extend(zero_and_dead(x))
    else:
        out.append(nonzero_count(x))
    return out


def unit_axis(x: torch.Tensor) -> int | None:
    """The dimension of ``x`` (batched, dim 0 the batch) whose entries are its
    units: the channels (dim 1) of a 4-d or 5-d map (PyTorch's NCHW and
    NCDHW), else the last dimension (features of ``[B, F]`` and ``[B, T, F]``).
    None for fewer than 2 dims: a tensor without units."""
    d = x.dim()
    if d < 2:
        return None
    return 1 if d >= 4 else d - 1


def sums_norm(x: torch.Tensor, axis: int) -> torch.Tensor:
    """L2 norm of the sums of ``x`` over ``axis`` (one sum per position along
    the other dimensions). With the sum of squares and the length along
    ``axis``, the spread of ``x`` along it (``slots._spread_share``): across
    the units of each sample, pixel or token (``axis`` the unit axis:
    unit_spread), or between the samples at each position (``axis`` 0, the
    batch: sample_spread). One reduction and one small norm."""
    x = float_view(x)
    return torch.linalg.vector_norm(x.sum(dim=axis, dtype=acc_dtype(x)))


def l2_norm(x: torch.Tensor) -> torch.Tensor:
    """L2 norm of ``x``, summed in its accumulation dtype (an input's, whose sum
    and count then give its std; a gradient's)."""
    x = float_view(x)
    return torch.linalg.vector_norm(x, dtype=acc_dtype(x))


def _count_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.int32 if x.numel() < 2**31 else torch.int64


def nonzero_count(x: torch.Tensor) -> torch.Tensor:
    """Count of non-zero values (NaN counts as non-zero)."""
    return x.bool().sum(dtype=_count_dtype(x))


def zero_and_dead(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(count of non-zeros, count of dead units) of a batched tensor.

    A unit is one element of a sample (dim 0 is the batch); it is dead when it
    is zero for every sample. One pass: the per-unit non-zero counts also give
    the total.
    """
    per_unit = x.reshape(x.shape[0], -1).bool().sum(0, dtype=_count_dtype(x))
    return per_unit.sum(dtype=torch.int64), (per_unit == 0).sum()


def saturated(x: torch.Tensor, lo: float | None, hi: float) -> torch.Tensor:
    """Count of values at or beyond the flat ends ``<= lo`` or ``>= hi``;
    with ``lo=None`` only the top end counts (ReLU6: its zeros are the dead
    side, measured as such, not saturation).

    As one distance test, ``|x - mid| >= half``: one temporary reused in
    place instead of two comparisons and an or."""
    if lo is None:
        return (x >= hi).sum(dtype=_count_dtype(x))
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    if mid == 0:
        d = x.abs()
    else:
        d = x - mid
        d.abs_()
    return (d >= half).sum(dtype=_count_dtype(x))


def nonfinite_count(x: torch.Tensor) -> torch.Tensor:
    """Exact count of NaN/inf values: ``x - x`` is NaN exactly there (0
    elsewhere), and this is 3-4x cheaper than ``(~isfinite(x)).sum()``."""
    x = float_view(x)
    return (x - x).bool().sum(dtype=_count_dtype(x))


HIST_MAX_VALUES = 1 << 20


def histogram(x: torch.Tensor, bins: int = HIST_BINS, max_values: int = HIST_MAX_VALUES) -> torch.Tensor:
    """Histogram of the finite values of ``x`` without a host sync.

    Returns a float tensor of ``bins + 5`` values: the bin counts, the count
    of non-finite values, then min, max, sum and sum of squares of the finite
    values. ``torch.histc`` needs Python bounds (a sync on CUDA) and
    ``bincount`` sizes its output from the data (another sync), so the bins
    come from a scatter_add over indices computed on the device; non-finite
    values go to an extra bin that is reported as their count.

    A picture, not a measurement: tensors above ``max_values`` elements are
    subsampled with a fixed stride (the temporaries here are several times
    the input's size), so counts are of the sample.
    """
    x = float_view(x).detach().reshape(-1)
    if x.numel() > max_values:
        x = x[:: -(-x.numel() // max_values)]
    x = x.to(torch.float32)
    if x.is_cpu:
        fast = _histogram_of_finite_cpu(x, bins)
        if fast is not None:
            return fast
    finite = torch.isfinite(x)
    inf = x.new_full((), math.inf)  # made on the device: no host-to-device copy
    mn = torch.where(finite, x, inf).amin()
    mx = torch.where(finite, x, -inf).amax()
    width = torch.clamp(mx - mn, min=1e-30)
    idx = torch.floor((x - mn) / width * bins).clamp_(0, bins - 1)
    idx = torch.where(finite, idx, torch.full_like(idx, bins)).to(torch.int64)
    counts = torch.zeros(bins + 1, device=x.device, dtype=torch.float32)
    counts.scatter_add_(0, idx, torch.ones_like(x))
    xf = torch.where(finite, x, torch.zeros_like(x))
    extras = torch.stack([mn, mx, xf.sum(), (xf * xf).sum()])
    return torch.cat([counts, extras])


def _histogram_of_finite_cpu(x: torch.Tensor, bins: int) -> torch.Tensor | None:
    """:func:`histogram` of a flat float32 CPU tensor without non-finite
    values, in four passes instead of a dozen (``scatter_add_`` into 30 bins
    and the masks are the general path's cost); None when ``x`` has a
    non-finite value. On the CPU
    the bounds can be read (no device to wait for), and ``bincount`` may
    size its output from the data."""
    mn, mx = torch.aminmax(x)
    lo, hi = mn.item(), mx.item()
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    width = max(hi - lo, 1e-30)
    idx = (x - lo).mul_(bins / width).clamp_(0, bins - 1).to(torch.int64)
    counts = torch.bincount(idx, minlength=bins + 1).to(torch.float32)
    s = x.sum()
    if not math.isfinite(s.item()):  # an overflowing sum: the general path's masks
        return None
    extras = torch.stack([mn, mx, s, torch.dot(x, x)])
    return torch.cat([counts, extras])


def _foreach(name: str, per_tensor, *lists: Sequence[torch.Tensor], dtype: torch.dtype | None = None) -> list:
    """``torch._foreach_<name>(*lists)`` (one kernel per call, as in
    ``clip_grad_norm_``; ``dtype=`` passed on where given), or
    ``per_tensor`` over the zipped lists.

    Chosen per call, never through a module-level flag: the private op is
    used where this torch has it, and a call it refuses (an unsupported
    dtype or device, mixed devices) runs per tensor, with a warning (shown
    once per message by the warnings filter), while later calls try it again.
    """
    op = getattr(torch, f"_foreach_{name}", None)
    if op is not None:
        try:
            return op(*lists) if dtype is None else op(*lists, dtype=dtype)
        except Exception as e:  # noqa: BLE001 -- any refusal: per tensor instead
            warnings.warn(f"tb_neuraldbg: torch._foreach_{name} failed ({e}); one op per tensor instead")
    return [per_tensor(*ts) for ts in zip(*lists)]


_IS_SPARSE = attrgetter("is_sparse")


def _by_device_and_dtype(tensors: Sequence[torch.Tensor]) -> list[tuple[list[int], list[torch.Tensor]]]:
    """``(indices, tensors)`` of ``tensors`` grouped by (device, dtype), the
    unit a foreach kernel takes; sparse tensors are left out.

    Grouped in C++ where torch has it (``clip_grad_norm_`` groups with it
    too): a Python pass over the thousands of gradients of a large model
    costs several times more."""
    tensors = list(tensors)
    group = getattr(torch._C, "_group_tensors_by_device_and_dtype", None)
    if group is not None and not any(map(_IS_SPARSE, tensors)):
        try:
            return [(list(idx), lists[0]) for lists, idx in group([tensors], True).values()]
        except Exception:  # noqa: BLE001 -- a private function: grouped here instead
            pass
    groups: dict[tuple, list[int]] = {}
    for i, t in enumerate(tensors):
        if not t.is_sparse:
            groups.setdefault((t.device, t.dtype), []).append(i)
    return [(idxs, [tensors[i] for i in idxs]) for idxs in groups.values()]


def foreach_norm(tensors: Sequence[torch.Tensor], dtype: torch.dtype | None = None) -> list[torch.Tensor]:
    """L2 norm of each tensor, as 0-d tensors, in the order given (of
    ``dtype``, summed in it, where one is given).

    One ``torch._foreach_norm`` per device and dtype group, or one
    ``vector_norm`` per tensor where it is missing or refuses the group (see
    ``_foreach``); sparse tensors are measured through their values.

    Also the gradient norms' formulation: right after a backward it beat
    BLAS dots (``sqrt(dot(x, x))``, which read faster only on warm data) on
    ``benchmarks/overhead.py``'s models.
    """
    groups = _by_device_and_dtype(tensors)
    norm = torch.linalg.vector_norm if dtype is None else partial(torch.linalg.vector_norm, dtype=dtype)
    if len(groups) == 1 and len(groups[0][0]) == len(tensors) and groups[0][0][-1] == len(tensors) - 1:
        return list(_foreach("norm", norm, groups[0][1], dtype=dtype))  # the common case: one group
    out: list[torch.Tensor | None] = [norm(t.coalesce().values()) if t.is_sparse else None for t in tensors]
    for idxs, ts in groups:
        for i, n in zip(idxs, _foreach("norm", norm, ts, dtype=dtype)):
            out[i] = n
    return out  # type: ignore[return-value]


def stacked_norms(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """L2 norm of each tensor, as :func:`foreach_norm`'s list of 0-d tensors:
    the hooks' parameter and gradient norms (``Instrument.norms``; a
    distributed run swaps in one that reduces over shards)."""
    return foreach_norm(tensors)


def unscaled_norms(tensors: Sequence[torch.Tensor], scale: torch.Tensor) -> torch.Tensor | list[torch.Tensor]:
    """:func:`stacked_norms` of gradients that still carry a GradScaler's
    ``scale`` (a 0-d tensor), divided by it: float32, one 1-d CPU tensor
    where every gradient is on the CPU, else 0-d tensors on their devices.

    Finite wherever the unscaled norm is. The scaled squares can leave
    float32's range while every value is finite: torch's float32 norms sum
    them in float32 (inf from a norm of 1.8e19, which gradients of norm 1
    reach under a scale of 2**64: a GradScaler that never sees an overflow,
    under bfloat16 autocast or in float32, doubles its scale every 2,000
    steps from 2**16 and gets there after 96,000).
    On the CPU a torch norm that overflowed is taken again in float64
    (checked on the host, where that costs no synchronisation; float64 norms
    of every step would cost several times more). On a GPU ``torch._foreach_norm`` sums in
    float64 as it reads (its ``dtype``: no copy), divided on the device.
    """
    tensors = list(tensors)
    if not all(t.device.type == "cpu" for t in tensors):
        return [(n / scale.to(n.device, torch.float64)).float() for n in foreach_norm(tensors, dtype=torch.float64)]
    norms = foreach_norm(tensors)
    wide = (torch.stack(norms) if len(norms) > 1 else norms[0].reshape(1)).double()  # (one op, not one a norm)
    for i in torch.isinf(wide).nonzero().flatten().tolist():
        t = tensors[i]
        wide[i] = torch.linalg.vector_norm(t.coalesce().values() if t.is_sparse else t, dtype=torch.float64)
    return (wide / scale.double()).float()


def rounded_away(diffs: Sequence[torch.Tensor], grads: Sequence[torch.Tensor]) -> tuple[list, list]:
    """(graded, lost): per tensor, the count of elements whose gradient is
    non-zero, and of those the count whose update ``diffs[i]`` (``w_{t-1} -
    w_t``) is exactly 0: a step the weights' precision rounded away.

    Overwrites ``diffs`` (the update copy, its norms taken): ``|sign(d)| *
    g`` in place, one ``_foreach`` per op and device/dtype group, is
    non-zero exactly where both are (no product of two small values that
    could underflow), then ``count_nonzero`` per tensor: no new buffer, and
    a bool tensor's ``sum`` is much slower than ``count_nonzero`` on the CPU. NaN counts
    as non-zero. A sharded parameter (FSDP2's DTensor) is counted on its
    local shard (tests/test_distributed.py)."""
    diffs = [local_shard(d) for d in diffs]
    grads = [local_shard(g) for g in grads]
    for idxs, dg in _by_device_and_dtype(diffs):
        _foreach("sign_", torch.Tensor.sign_, dg)
        _foreach("abs_", torch.Tensor.abs_, dg)
        _foreach("mul_", torch.Tensor.mul_, dg, [grads[i] for i in idxs])
    graded = [torch.count_nonzero(g) for g in grads]
    return graded, [n - torch.count_nonzero(d) for n, d in zip(graded, diffs)]


def local_shard(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (FSDP2, tensor parallel); a plain tensor as it is."""
    return t.to_local() if hasattr(t, "to_local") else t


def foreach_sub_(xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor]) -> None:
    """``xs[i] -= ys[i]`` in place, one ``torch._foreach_sub_`` per device
    and dtype group of ``xs`` where torch allows (see ``_foreach``)."""
    for idxs, xg in _by_device_and_dtype(xs):
        _foreach("sub_", torch.Tensor.sub_, xg, [ys[i] for i in idxs])
    for x, y in zip(xs, ys):
        if x.is_sparse:
            x.sub_(y)
