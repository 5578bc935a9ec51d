"""The statistics: device-side reductions and their host-side completion.

Device side (called from hooks on the training thread): every function takes
tensors and returns 0-d or 1-d tensors on the same device, never a Python
number, so nothing here waits for the device. The formulations are the
cheapest measured here (torch 2.13, CPU, 2 threads): ``aminmax``, ``sum`` and
``vector_norm`` (no temporaries), ``_foreach_norm`` for many tensors at once.
Counts use ``x.bool().sum(dtype=int32)``: ``count_nonzero`` is 5-20x slower on
ReLU outputs (many zeros) in this CPU build (1.2 ms against 0.05 ms for
256x1024 floats), and an int64 sum of bools is up to 8x slower on large
tensors. On CPU, reductions of tensors under 2**22 elements run faster on one
thread (waking the second costs more than it saves; a sum of 256x1024 floats
takes 0.015 ms on one thread, 0.04-0.1 ms on two): see :class:`one_thread`.

Host side (called on the writer's worker thread): :func:`assemble` turns the
flat vector of one step (every device value copied to the host in one
transfer) plus its slot descriptions into the ``[L, len(METRICS)]`` float32
row of the on-disk format, with numpy.

Why one file: both sides are written against the same slot keys (``Key``):
a reduction added on the device side and its completion on the host side
change together, and a test holds them to the same row.
"""

from __future__ import annotations

import math
import warnings
from operator import attrgetter
from typing import Sequence

import numpy as np
import torch

from ..format import metadata
from . import cpu_kernel, grad_reader

__all__ = [
    "Key",
    "flag_moment",
    "moments",
    "zero_and_dead",
    "saturated",
    "nonfinite_count",
    "nonzero_count",
    "histogram",
    "foreach_norm",
    "stacked_norms",
    "foreach_sub_",
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
    "SMALL",
    "GRAIN",
]

HIST_BINS = 30
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
    setting. ``torch.set_num_threads`` costs about 0.2 us here.
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


class Key:
    """Names of the slots a step vector is made of (small ints for numpy).

    A slot is one value (or a run of values) of the step vector, tagged with
    the row it belongs to and one of these keys; :func:`assemble` turns them
    into metrics. ``OUT_*`` describe a module's output (or the batch for the
    ``<input>`` row), ``IN_*`` its first input.
    """

    OUT_SUM = 0  # every step: mean, and a free non-finite flag (NaN/inf propagate)
    OUT_MIN = 1
    OUT_MAX = 2
    OUT_NORM = 3  # L2 norm: its square is the sum of squares
    OUT_NZ = 4  # count of non-zeros
    OUT_DEAD = 5  # units that are zero for every sample of the batch
    OUT_SAT = 6  # saturated values (bounded activations)
    OUT_NF = 7  # exact count of non-finite values
    IN_SUM = 8
    IN_NZ = 9
    IN_DEAD = 10
    IN_NF = 11
    GRAD_NORM = 12  # one per parameter; squares add up per row
    GRAD_NF = 13  # one per parameter; counts add up per row
    WEIGHT_NORM = 14
    UPD_NORM = 15  # ||w_t - w_{t-1}|| per parameter
    UPD_BASE = 16  # ||w_{t-1}|| per parameter
    VALUE = 17  # loss value or learning rate
    SCALE = 18  # GradScaler scale
    HIST = 19  # a run of HIST_BINS + 5 values (see histogram())
    # Host-side constants (never on the device).
    OUT_N = 20  # number of output elements
    OUT_UNITS = 21  # number of units (elements per sample)
    IN_N = 22
    IN_UNITS = 23
    IN_REF = 24  # the input is the output of this row: copy its statistics
    GRAD_MISSING = 25
    OUT_INHERIT = 26  # not measured: the output's non-finite flag is the input's
    GOUT_SUM = 27  # sum of the gradient w.r.t. the output: a non-finite flag
    GOUT_NF = 28  # exact count of non-finite values of that gradient
    # Host-side facts of the step (see optimizer_facts.py).
    GRAD_CARRIED = 29  # norm of a gradient left over from the previous step
    RAN_NO_GRAD = 30  # the module ran with autograd disabled
    OPT_GROUP = 31  # param group holding the row's parameters (-1: none)
    OPT_LR = 32
    OPT_WD = 33
    OPT_MOMENTUM = 34
    # Not measured: the output gradient's flag is 0 when the step's evidence
    # is clean (nonfinite="replay": see Instrument._measure_module).
    GOUT_CLEAN = 35
    COUNT = 36


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
    place instead of two comparisons and an or (``mid`` and ``half`` the
    CPU kernel's own, :func:`cpu_kernel.saturation_bounds`: both count the
    same values)."""
    if lo is None:
        return (x >= hi).sum(dtype=_count_dtype(x))
    mid, half, _ = cpu_kernel.saturation_bounds(lo, hi)
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
        fast = cpu_kernel.histogram(x, bins)  # two passes in C, where it is built
        if fast is not None:
            return fast
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
    values, in four passes instead of a dozen (9.7 ms against 1.0 ms for
    256x1024 ReLU outputs, one thread: ``scatter_add_`` into 30 bins and the
    masks are the cost); None when ``x`` has a non-finite value. On the CPU
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


def _foreach(name: str, per_tensor, *lists: Sequence[torch.Tensor]) -> list:
    """``torch._foreach_<name>(*lists)`` (one kernel per call, as in
    ``clip_grad_norm_``), or ``per_tensor`` over the zipped lists.

    Chosen per call, never through a module-level flag: the private op is
    used where this torch has it, and a call it refuses (an unsupported
    dtype or device, mixed devices) runs per tensor, with a warning (shown
    once per message by the warnings filter), while later calls try it again.
    """
    op = getattr(torch, f"_foreach_{name}", None)
    if op is not None:
        try:
            return op(*lists)
        except Exception as e:  # noqa: BLE001 -- any refusal: per tensor instead
            warnings.warn(f"tb_neuraldbg: torch._foreach_{name} failed ({e}); one op per tensor instead")
    return [per_tensor(*ts) for ts in zip(*lists)]


_IS_SPARSE = attrgetter("is_sparse")


def _by_device_and_dtype(tensors: Sequence[torch.Tensor]) -> list[tuple[list[int], list[torch.Tensor]]]:
    """``(indices, tensors)`` of ``tensors`` grouped by (device, dtype), the
    unit a foreach kernel takes; sparse tensors are left out.

    Grouped in C++ where torch has it (``clip_grad_norm_`` groups with it
    too): a Python pass over the 1,500 gradients of a 1,000-module model
    costs a millisecond, the C++ one a fifth of that."""
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


def foreach_norm(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """L2 norm of each tensor, as 0-d tensors, in the order given.

    One ``torch._foreach_norm`` per device and dtype group, or one
    ``vector_norm`` per tensor where it is missing or refuses the group (see
    ``_foreach``); sparse tensors are measured through their values.

    Also the gradient norms' formulation: right after a backward, on the
    benchmark's MLP (33 MB of gradients, 2 threads), it takes 1.6-1.7 ms of
    wall and CPU time, against 2.5-2.9 ms wall and 2.6 ms CPU for BLAS dots
    (``sqrt(dot(x, x))``, which read faster only on warm data) and 1.8 ms for
    the same dots on one thread (0.3 against 0.9 ms on the small ResNet).
    """
    groups = _by_device_and_dtype(tensors)
    if len(groups) == 1 and len(groups[0][0]) == len(tensors) and groups[0][0][-1] == len(tensors) - 1:
        return list(_foreach("norm", torch.linalg.vector_norm, groups[0][1]))  # the common case: one group
    out: list[torch.Tensor | None] = [
        torch.linalg.vector_norm(t.coalesce().values()) if t.is_sparse else None for t in tensors
    ]
    for idxs, ts in groups:
        for i, n in zip(idxs, _foreach("norm", torch.linalg.vector_norm, ts)):
            out[i] = n
    return out  # type: ignore[return-value]


def stacked_norms(tensors: Sequence[torch.Tensor]) -> torch.Tensor | list[torch.Tensor]:
    """L2 norm of each tensor: one 1-d float32 tensor where the fused CPU
    kernel takes the whole list (dense float32, bfloat16 or float16 CPU tensors: one call
    instead of a dispatch and a 0-d tensor each, which on a 1,000-module
    model's 1,500 gradients cost 4 ms and 1 ms more to stack), else
    :func:`foreach_norm`'s list of 0-d tensors. The hooks' parameter and
    gradient norms (``Instrument.norms``), which take either."""
    read = grad_reader.read_data(tensors) if type(tensors) is list else None
    if read is not None:  # (addresses and sizes in one C++ call: 0.3 against 1.5 ms for 1,500 weights)
        fast = cpu_kernel.norms_at(read.ptrs, read.lens, read.kinds())  # (None: cpu_kernel.norms refuses them too)
    else:
        fast = cpu_kernel.norms(tensors)
    return fast if fast is not None else foreach_norm(tensors)


def foreach_sub_(xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor]) -> None:
    """``xs[i] -= ys[i]`` in place, one ``torch._foreach_sub_`` per device
    and dtype group of ``xs`` where torch allows (see ``_foreach``)."""
    for idxs, xg in _by_device_and_dtype(xs):
        _foreach("sub_", torch.Tensor.sub_, xg, [ys[i] for i in idxs])
    for x, y in zip(xs, ys):
        if x.is_sparse:
            x.sub_(y)


# --------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------

_M = metadata.METRIC_INDEX
#: The columns whose non-finite counts are a step's evidence (a clean step has none > 0).
NONFINITE_EVIDENCE = np.array([_M[m] for m in ("act_nonfinite", "in_nonfinite", "grad_nonfinite", "gout_nonfinite")])
# Keys with several slots per row (summed), the others have one.
_MULTI = np.zeros(Key.COUNT, dtype=bool)
_MULTI[[Key.GOUT_SUM, Key.GRAD_NORM, Key.GRAD_NF, Key.GRAD_CARRIED, Key.WEIGHT_NORM, Key.UPD_NORM, Key.UPD_BASE,
        Key.HIST]] = True


class SlotLayout:
    """Where the slots of a step vector go in the ``[Key.COUNT, L]`` table of
    :class:`_Slots`: what depends on the slots' rows and keys alone. Steps
    of the same kind (every cheap step, every full one) have the same
    layout, so :class:`.rows.RowAssembler` keeps the recent ones, and
    assembles a burst's steps of one layout together (:func:`assemble_steps`).

    Single-valued keys: a later slot of the same key and row replaces an
    earlier one (only the last is kept here). Multi-valued keys (one slot
    per parameter, per micro-batch) add up, in the order of the slots, in
    one ``bincount`` for all of them. ``present``: read-only, bool
    ``[Key.COUNT, L]``, the places with at least one slot.
    """

    __slots__ = ("num_rows", "single", "single_at", "summed", "summed_at", "present")

    def __init__(self, rows: np.ndarray, keys: np.ndarray, num_rows: int):
        L = self.num_rows = num_rows
        rows = np.asarray(rows, dtype=np.int64)
        keys = np.asarray(keys, dtype=np.int64)
        flat = keys * L + rows
        multi = _MULTI[keys]
        single = np.flatnonzero(~multi)
        # the last slot of each place: the first of the reversed order
        _, last = np.unique(flat[single][::-1], return_index=True)
        self.single = single[::-1][last]
        self.single_at = flat[self.single]
        self.summed = np.flatnonzero(multi & (keys != Key.HIST))
        self.summed_at = flat[self.summed]
        present = np.zeros(Key.COUNT * L, dtype=bool)
        present[flat] = True
        present.flags.writeable = False
        self.present = present.reshape(Key.COUNT, L)


class _Slots:
    """``n`` step vectors of one layout scattered into one ``[n, Key.COUNT,
    L]`` table (a slot's place is ``key * L + row``, see :class:`SlotLayout`),
    with per-key accessors (``[n, L]``) that are views of it."""

    def __init__(self, values: np.ndarray, layout: SlotLayout):
        n, L = len(values), layout.num_rows
        size = Key.COUNT * L
        table = np.full((n, size), np.nan)
        table[:, layout.single_at] = values[:, layout.single]
        # one bincount for every step: step i's places are offset by i * size
        # (each bin still adds its own step's slots, in their order)
        at = (np.arange(n)[:, None] * size + layout.summed_at).reshape(-1)
        vm = values[:, layout.summed].reshape(-1)
        self.table = table.reshape(n, Key.COUNT, L)
        self.present_table = layout.present
        self.sums = np.bincount(at, weights=vm, minlength=n * size).reshape(n, Key.COUNT, L)
        self.squares = np.bincount(at, weights=vm * vm, minlength=n * size).reshape(n, Key.COUNT, L)

    def present(self, key: int) -> np.ndarray:
        """Rows that have at least one slot of this key ([L], the same at every step)."""
        return self.present_table[key]

    def pick(self, key: int) -> np.ndarray:
        """Per-row value of a single-valued key (NaN where absent)."""
        return self.table[:, key]

    def sum(self, key: int, square: bool = False) -> np.ndarray:
        """Per-row sum (of squares) of a multi-valued key (NaN where absent)."""
        return np.where(self.present_table[key], (self.squares if square else self.sums)[:, key], np.nan)

    def norm(self, key: int) -> np.ndarray:
        """Per-row L2 norm from per-tensor norms: sqrt of the sum of squares."""
        return np.sqrt(self.sum(key, square=True))


def _flag(evidence: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Non-finite indicator from a sum or norm that propagates NaN/inf:
    1 = at least one non-finite value, 0 = none, NaN = not measured."""
    return np.where(present, np.where(np.isfinite(evidence), 0.0, 1.0), np.nan)


def assemble(values: np.ndarray, rows: np.ndarray, keys: np.ndarray, num_rows: int,
             layout: SlotLayout | None = None) -> np.ndarray:
    """The float32 ``[num_rows, len(METRICS)]`` row of one step.

    ``values``, ``rows`` and ``keys`` are parallel 1-d arrays (the step vector
    and its slot descriptions, host constants included; ``HIST`` slots are
    ignored here). Everything not measured is NaN. Non-finite counts are exact
    where an exact count was taken (``*_NF`` slots) and otherwise 1 for "at
    least one" (from the sum/norm, which propagate NaN and inf). ``layout``:
    ``SlotLayout(rows, keys, num_rows)`` when the caller keeps it.
    """
    if layout is None:
        layout = SlotLayout(rows, keys, num_rows)
    return assemble_steps(np.asarray(values, dtype=np.float64)[None], layout)[0]


def assemble_steps(values: np.ndarray, layout: SlotLayout) -> np.ndarray:
    """The float32 ``[n, L, len(METRICS)]`` rows of ``n`` steps of one
    layout (``values``: float64 ``[n, slots]``), each the row that
    :func:`assemble` gives for its step alone, in the numpy calls of one
    (elementwise: the same values; the worker assembles a burst's steps of a
    layout together)."""
    values = np.asarray(values, dtype=np.float64)
    L = layout.num_rows
    row = np.full((len(values), L, len(metadata.METRICS)), np.nan)
    slots = _Slots(values, layout)
    pick = slots.pick

    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        # Outputs (activations; the batch for <input>).
        n = pick(Key.OUT_N)
        s = pick(Key.OUT_SUM)
        mn, mx, q, nz = pick(Key.OUT_MIN), pick(Key.OUT_MAX), pick(Key.OUT_NORM), pick(Key.OUT_NZ)
        mean = s / n
        row[..., _M["act_mean"]] = mean
        var = (q * q - s * mean) / np.maximum(n - 1, 1)
        # Rounding can make a zero variance slightly negative; NaN stays NaN.
        row[..., _M["act_std"]] = np.sqrt(np.where(var < 0, 0.0, var))
        row[..., _M["act_absmax"]] = np.maximum(-mn, mx)
        row[..., _M["act_zero_frac"]] = 1.0 - nz / n
        row[..., _M["act_dead_frac"]] = pick(Key.OUT_DEAD) / pick(Key.OUT_UNITS)
        row[..., _M["act_sat_frac"]] = pick(Key.OUT_SAT) / n
        flag = _flag(s, slots.present(Key.OUT_SUM))
        # Where min/max were taken they decide: a float sum of finite values
        # can overflow to inf, and aminmax returns NaN when there is a NaN.
        mm_known = ~np.isnan(mn) | ~np.isnan(mx)
        mm_finite = np.isfinite(mn) & np.isfinite(mx)
        flag = np.where(mm_known, np.where(mm_finite, 0.0, 1.0), flag)
        nf = pick(Key.OUT_NF)
        row[..., _M["act_nonfinite"]] = np.where(np.isnan(nf), flag, nf)

        # First input (functional activations upstream of the module).
        in_n = pick(Key.IN_N)
        row[..., _M["in_zero_frac"]] = 1.0 - pick(Key.IN_NZ) / in_n
        row[..., _M["in_dead_frac"]] = pick(Key.IN_DEAD) / pick(Key.IN_UNITS)
        in_nf = pick(Key.IN_NF)
        in_flag = _flag(pick(Key.IN_SUM), slots.present(Key.IN_SUM))
        row[..., _M["in_nonfinite"]] = np.where(np.isnan(in_nf), in_flag, in_nf)
        ref = pick(Key.IN_REF)
        has_ref = ~np.isnan(ref)
        inherit = ~np.isnan(pick(Key.OUT_INHERIT))
        with_ref = has_ref.any(axis=1)
        for i in np.flatnonzero(with_ref):
            _resolve_refs(row[i], has_ref[i], ref[i][has_ref[i]].astype(np.int64), inherit[i])
        just_inherit = inherit & ~with_ref[:, None]
        if just_inherit.any():
            row[..., _M["act_nonfinite"]] = np.where(just_inherit, row[..., _M["in_nonfinite"]],
                                                     row[..., _M["act_nonfinite"]])

        # Gradient w.r.t. the output (a tensor hook in backward).
        gout_nf = pick(Key.GOUT_NF)
        gout_flag = _flag(slots.sum(Key.GOUT_SUM), slots.present(Key.GOUT_SUM))
        row[..., _M["gout_nonfinite"]] = np.where(np.isnan(gout_nf), gout_flag, gout_nf)

        # Parameters.
        gn = slots.norm(Key.GRAD_NORM)
        row[..., _M["grad_norm"]] = gn
        gnf = slots.sum(Key.GRAD_NF)
        gflag = _flag(gn, slots.present(Key.GRAD_NORM))
        row[..., _M["grad_nonfinite"]] = np.where(np.isnan(gnf), gflag, gnf)
        row[..., _M["grad_missing"]] = pick(Key.GRAD_MISSING)
        row[..., _M["weight_norm"]] = slots.norm(Key.WEIGHT_NORM)
        row[..., _M["update_ratio"]] = slots.norm(Key.UPD_NORM) / slots.norm(Key.UPD_BASE)
        row[..., _M["value"]] = pick(Key.VALUE)
        row[..., _M["scale"]] = pick(Key.SCALE)
        # Host-side facts of the step (optimizer_facts.py).
        row[..., _M["grad_carried"]] = slots.norm(Key.GRAD_CARRIED)
        row[..., _M["ran_without_grad"]] = pick(Key.RAN_NO_GRAD)
        row[..., _M["opt_group"]] = pick(Key.OPT_GROUP)
        row[..., _M["lr"]] = pick(Key.OPT_LR)
        row[..., _M["weight_decay"]] = pick(Key.OPT_WD)
        row[..., _M["momentum"]] = pick(Key.OPT_MOMENTUM)
        # Output gradients not read: none is non-finite when nothing else
        # is (a non-finite one reaches a parameter's gradient or the loss:
        # every row's evidence, pseudo-rows included, measured at this step).
        implied = slots.present(Key.GOUT_CLEAN) & np.isnan(row[..., _M["gout_nonfinite"]])
        if implied.any():
            clean = ~(row[..., NONFINITE_EVIDENCE] > 0).any(axis=(1, 2))  # (NaN > 0 is False)
            row[..., _M["gout_nonfinite"]] = np.where(implied & clean[:, None], 0.0, row[..., _M["gout_nonfinite"]])
    return row.astype(np.float32)


def _resolve_refs(row: np.ndarray, has_ref: np.ndarray, src: np.ndarray, inherit: np.ndarray) -> None:
    """One step's input statistics taken from the rows they refer to
    (``src``: the earlier row whose output is this row's input), in place.
    A reference points to an earlier row, which may itself inherit (ReLU ->
    Tanh): repeat until the chain is resolved (each pass resolves at least
    one more link, so L passes always suffice)."""
    for _ in range(len(row)):
        before = row[:, _M["act_nonfinite"]].copy()
        for dst_m, src_m in (
            ("in_zero_frac", "act_zero_frac"),
            ("in_dead_frac", "act_dead_frac"),
            ("in_nonfinite", "act_nonfinite"),
        ):
            row[has_ref, _M[dst_m]] = row[src, _M[src_m]]
        row[inherit, _M["act_nonfinite"]] = row[inherit, _M["in_nonfinite"]]
        if np.array_equal(before, row[:, _M["act_nonfinite"]], equal_nan=True):
            break


def histogram_parts(run: np.ndarray, bins: int = HIST_BINS) -> dict:
    """Decode one :func:`histogram` run into the fields of a TensorBoard
    histogram (``min, max, num, sum, sum_squares, bucket_limits,
    bucket_counts``) plus ``nonfinite``; None when there is no finite value."""
    counts = np.asarray(run[:bins], dtype=np.float64)
    nonfinite = float(run[bins])
    mn, mx, s, sq = (float(v) for v in run[bins + 1 : bins + 5])
    num = float(counts.sum())
    if num <= 0 or not (math.isfinite(mn) and math.isfinite(mx)):
        return {"nonfinite": nonfinite, "num": 0.0}
    edges = np.linspace(mn, mx, bins + 1) if mx > mn else np.array([mn] * bins + [mx + 1e-12])
    # TensorBoard's histogram proto stores the right edge of each bucket.
    return {
        "min": mn,
        "max": mx,
        "num": num,
        "sum": s,
        "sum_squares": sq,
        "bucket_limits": edges[1:].tolist(),
        "bucket_counts": counts.tolist(),
        "nonfinite": nonfinite,
    }
