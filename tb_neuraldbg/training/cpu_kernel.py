"""One read of a CPU activation for all of a full step's statistics (``moments.c``).

torch has no op that takes several reductions in one pass, and each of its
reductions reads the tensor again: a freshly written 1 MB activation costs
50-130 us a pass on the project's 2-core VM, five passes a module (min and
max, sum, norm, the zero count's ``bool()`` and its sum). ``moments.c`` takes
min, max, sum, L2 norm, non-zero, non-finite and dead-unit counts in one
vectorised pass (on the benchmark MLP's 256x1024 ReLU outputs, right after
the layer wrote them: 135-190 us against 670-710 us wall for torch's ops),
a bounded activation's saturated values in the same pass (a fresh 256x1024
Tanh output: 59 us without them, 71 us with them, 294 us with
``stats.saturated``'s torch ops after the pass),
a histogram step's bins in two passes (310 against 1,250 us there), and the
norms of a step's many small gradients in one call (1,502 gradients of the
benchmark's 1,000-module model: 2.7 against 5.0 ms for ``_foreach_norm``),
the sum that is an output gradient's non-finite flag (:func:`total`), and
whether the values a step checks are all finite (:func:`finite`).

Reads of 2 MB or more, and a histogram's binning pass over as many values,
are cut into parts read by torch's own intra-op threads
(:data:`PART_ELEMENTS`): a fresh activation or the gradients are read at one
core's memory bandwidth otherwise.

It is compiled at first use with the machine's C compiler (``$CC``, else
``cc``) into a per-user cache, as Triton builds its launcher and Inductor
its CPU kernels, in under a second and once per machine; loaded through
ctypes (which releases the GIL during the call), and checked against
known answers before it is used (:mod:`kernel_build`). Where there is no compiler, the build or
the check fails, or ``TB_NEURALDBG_CPU_KERNEL=0`` is set, :func:`moments`,
:func:`histogram`, :func:`norms`, :func:`total` and :func:`finite` return None and the
callers use torch's ops (``stats.moments``, ``stats.histogram``,
``torch._foreach_norm``, a float64 ``sum``): the two agree but for the
rounding of sums (the kernel adds in float lanes within a block and in
double across blocks).
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import threading
from itertools import repeat
from operator import attrgetter, is_

import numpy as np
import torch

from . import kernel_build

__all__ = [
    "ENV", "MAX_ELEMENTS", "PART_ELEMENTS", "available", "finite", "helper_seconds", "histogram", "histogram_known",
    "moments", "norms", "norms_at", "norms_at_host", "reads_in_parts", "saturation_bounds", "set_enabled",
    "set_reads_in_parts", "takes", "total",
]

log = logging.getLogger(__name__)

#: Set to ``0`` to never build nor use the kernel.
ENV = "TB_NEURALDBG_CPU_KERNEL"

#: Larger tensors go to torch's ops: on a machine with many cores torch's
#: parallel passes can then be faster than the kernel's (one read, in parts
#: on torch's threads from 2 MB: :data:`PART_ELEMENTS`).
MAX_ELEMENTS = 1 << 24

#: From twice this many values (2 MB), :func:`moments` reads a tensor in
#: parts of at least this many, one per intra-op thread of torch's (its
#: OpenMP team, whose threads wait for torch's next op: the library is built
#: with OpenMP and uses torch's own runtime, checked at load, else it reads
#: on one core). A fresh 4 MB activation after a conv on the project's
#: 2-core VM (``benchmarks/reads_in_parts.py``, medians of 60): 372 -> 241 us
#: under OpenMP's default wait policy, 416 -> 269 us under
#: ``OMP_WAIT_POLICY=PASSIVE``; 1 MB gained nothing. (A thread of the
#: kernel's own, started for the read, was slower than one core under the
#: default policy: it shares the second core with torch's spinning thread.)
#: A histogram's binning pass (:func:`histogram`, :func:`histogram_known`) is
#: cut the same way, each part counting into bins of its own: 4 MB, 878 ->
#: 461 us. The value is ``PART_MIN`` in moments.c.
PART_ELEMENTS = kernel_build.PART_ELEMENTS

_lock = threading.Lock()
_fn = None  # the loaded moments function, or False once loading failed
_fn_bf16 = None  # the same of bfloat16 values, loaded with it
_fn_f16 = None  # the same of float16 values, loaded with it
_hist = None  # the histogram function, loaded with it
_hist_known = None  # its binning pass alone, loaded with it
_hist_known_bf16 = None  # the same of bfloat16 values, loaded with it
_hist_known_f16 = None  # the same of float16 values, loaded with it
_norms = None  # the many-norms function, loaded with it
_norms_bf16 = None  # the same of bfloat16 arrays, loaded with it
_norms_f16 = None  # the same of float16 arrays, loaded with it
_norms2 = None  # either, read by two cores, loaded with it
_helper_seconds = None  # the other threads' CPU time in reads in parts so far, loaded with it
_shared_openmp = False  # whether its OpenMP runtime is torch's, found when loaded
_set_parts = None  # its switch of reads in parts, loaded with it
_in_parts = True  # reads in parts wanted (set_reads_in_parts)
_sum = None  # the sum function, loaded with it
_finite = None  # the all-finite function, loaded with it
_enabled = True


def set_enabled(on: bool) -> None:
    """Use the kernel (the default) or torch's ops (benchmarks compare the two)."""
    global _enabled
    _enabled = bool(on)


def available() -> bool:
    """True when the kernel is built, loaded, checked and enabled (builds it
    at the first call)."""
    return _enabled and _load() is not None


#: The kinds of values the kernel reads (moments.c's F32, BF16, F16), by
#: dtype: float32, and bfloat16 and float16 (a CPU autocast's activations, a
#: model cast to them), whose values it reads as the floats they are.
KINDS = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_KIND_SIZE = (4, 2, 2)  # (bytes a value, by kind)
_KERNEL_DTYPES = frozenset(KINDS)


def takes(x: torch.Tensor) -> bool:
    """True when :func:`moments` takes ``x`` (a float32, bfloat16 or float16
    CPU tensor of 1 to :data:`MAX_ELEMENTS` values, contiguous or
    channels_last, not a subclass) and the kernel is there: its caller then
    needs no torch op, nor a switch of torch's intra-op threads around it."""
    if not _enabled or type(x) is not torch.Tensor:
        return False
    if x.dtype not in _KERNEL_DTYPES or not x.is_cpu or x.layout is not torch.strided:
        return False
    return (
        0 < x.numel() <= MAX_ELEMENTS and _dense(x) and not x.is_neg()  # (a negative view: opposites in memory)
        and bool(_fn if _fn is not None else _load())
    )


def _takes_f32(x: torch.Tensor) -> bool:
    """:func:`takes`, of float32 values only (:func:`total`, :func:`finite`)."""
    return x.dtype is torch.float32 and takes(x)


_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}


def _dense(x: torch.Tensor) -> bool:
    """Whether ``x``'s values fill ``numel()`` places from its data pointer
    with each sample's in a block of its own, laid out as every other
    sample's: contiguous, or channels_last (a CNN's activations, weights and
    gradients in that memory format). Every statistic the kernel takes is
    the same in that order (a sample's units permuted alike in every
    sample: the same count of dead ones). (grads.cpp takes any dense
    layout; there is no cheap test for one in Python.)"""
    return x.is_contiguous() or (x.dim() in _LAST and x.is_contiguous(memory_format=_LAST[x.dim()]))


def moments(
    x: torch.Tensor, units: int = 0, saturation: tuple[float, float, float] | None = None
) -> list[float] | None:
    """``[min, max, sum, L2 norm, non-zeros, non-finite, dead units]`` of
    ``x`` in one pass, as Python floats, and the count of saturated values
    after them when ``saturation`` is given; None when the kernel does not
    take ``x`` (see :func:`takes`: a float32, bfloat16 or float16 CPU tensor,
    contiguous or channels_last, of at most :data:`MAX_ELEMENTS` values, not
    a subclass; the kernel there).

    ``units > 0``: ``x`` is batched (dim 0 the batch, ``units`` values a
    sample) and dead units (zero in every sample) are counted; else that
    value is -1. ``saturation``: :func:`saturation_bounds` of a bounded
    activation's ends (the count is ``stats.saturated``'s). min and max are
    NaN when a value is NaN (as ``torch.aminmax`` gives them); the sum and
    the norm are non-finite where torch's are (NaN and inf propagate), but
    for a norm whose squares add up beyond float32's range (about 1.8e19):
    torch's float32 dot is inf there, this one too unless none of its lanes'
    partial sums overflowed (then the true norm).
    """
    if not takes(x):
        return None
    n = x.numel()
    if units and n % units:
        return None
    dtype = x.dtype
    fn = _fn if dtype is torch.float32 else _fn_bf16 if dtype is torch.bfloat16 else _fn_f16  # (loaded by takes)
    # ctypes buffers, not numpy arrays: an array's .ctypes.data costs about
    # 1 us each, 2 us of a 6 us call on a small tensor (1,250 calls a full
    # step of a 1,000-module model).
    out = (ctypes.c_double * 8)()
    alive = (ctypes.c_int32 * units)() if units else None
    bounds = (ctypes.c_float * 3)(*saturation) if saturation is not None else None
    if fn(x.data_ptr(), n, units, alive, bounds, out) != 0:
        return None
    return out[:] if saturation is not None else out[:7]


def saturation_bounds(lo: float | None, hi: float) -> tuple[float, float, float]:
    """The kernel's form ``(mid, half, sign)`` of a bounded activation's flat
    ends ``<= lo`` or ``>= hi`` (``lo=None``: the top end only), for
    :func:`moments`: a value ``v`` is saturated where ``max(d, sign * d) >=
    half``, ``d = v - mid``, in float32, which is how ``stats.saturated``
    tests it with torch's ops (``|v - mid| >= half``, or ``v >= hi``), so
    both count the same values. The same bounds serve a bfloat16 or float16
    tensor: the kernel rounds ``mid``, ``half`` and ``d`` to its type there,
    as torch's ops on that tensor do (they cast a Python number to the
    tensor's type)."""
    if lo is None:
        return (hi, 0.0, 1.0)
    return ((lo + hi) / 2, (hi - lo) / 2, -1.0)


def total(x: torch.Tensor) -> float | None:
    """The sum of ``x``'s values as a Python float (the non-finite flag of an
    output gradient: NaN and inf propagate), added as :func:`moments` adds
    them; None when :func:`takes` does not take ``x``."""
    if not _takes_f32(x):
        return None
    return _sum(x.data_ptr(), x.numel())


def histogram_known(x: torch.Tensor, bins: int, moments: list[float]) -> torch.Tensor | None:
    """:func:`histogram` of a tensor that :func:`takes` takes, whose
    :func:`moments` were just read (``moments``: that list): its min and max
    bound the bins, its sum and norm give the last two values, so only the
    binning pass reads ``x`` (bfloat16 and float16 values binned as the
    floats they hold, as ``stats.histogram`` bins its float32 copy). None
    when a value is not finite or the kernel does not take ``x``."""
    if moments[5] != 0 or not takes(x):
        return None
    fn = (_hist_known, _hist_known_bf16, _hist_known_f16)[KINDS[x.dtype]]
    if fn is None:
        return None
    known = (ctypes.c_double * 4)(moments[0], moments[1], moments[2], moments[3] * moments[3])
    out = np.empty(bins + 5)
    if fn(x.data_ptr(), x.numel(), bins, known, out.ctypes.data) != 0:
        return None
    return torch.from_numpy(out.astype(np.float32))


def finite(x: torch.Tensor) -> bool | None:
    """Whether every value of ``x`` is finite, in one read without a torch
    op; None when :func:`takes` does not take ``x``."""
    if not _takes_f32(x):
        return None
    return _finite(x.data_ptr(), x.numel()) == 1


def histogram(x: torch.Tensor, bins: int) -> torch.Tensor | None:
    """``stats.histogram``'s float32 run (``bins`` counts, 0 non-finite,
    min, max, sum, sum of squares) of a 1-d float32 CPU tensor with any
    stride, in two passes instead of torch's four and a ``bincount``; None
    when the kernel does not take ``x`` or a value is not finite (torch's
    general path handles those)."""
    if not _enabled or type(x) is not torch.Tensor:
        return None
    if x.dtype is not torch.float32 or not x.is_cpu or x.layout is not torch.strided or x.dim() != 1 or x.is_neg():
        return None
    n = x.numel()
    if n == 0 or n > MAX_ELEMENTS or x.stride(0) <= 0:
        return None
    fn = _hist if _hist is not None else (_load() and _hist)
    if not fn:
        return None
    out = np.empty(bins + 5)
    if fn(x.data_ptr(), n, x.stride(0), bins, out.ctypes.data) != 0:
        return None
    return torch.from_numpy(out.astype(np.float32))


_PLAIN = frozenset((torch.Tensor, torch.nn.Parameter))  # not a wrapper subclass (DTensor): its data_ptr is not its values
_LAYOUT, _DTYPE, _IS_CPU = attrgetter("layout"), attrgetter("dtype"), attrgetter("is_cpu")


#: :func:`norms` takes lists of tensors of at most this many values on
#: average when torch has more than :data:`NORMS_FEW_THREADS` intra-op
#: threads: above it torch's norms, on many threads, can read faster than
#: the kernel's one. With 1 or 2 threads the kernel is faster at every size
#: (measured right after a backward on the project's 2-core VM, 2 threads:
#: the MLP's 18 gradients of 470,000 values 1.90 against 2.05 ms for
#: ``_foreach_norm``, the Transformer's 50 0.87 against 1.11 ms, the
#: 1,000-module model's 1,502 of 2,800 2.64 against 6.99 ms).
NORMS_MEAN_ELEMENTS = 1 << 15
NORMS_FEW_THREADS = 2
#: From this many values in all (4 MB), and with torch on two intra-op
#: threads or more, the norms are read by two of torch's threads (the
#: kernel's reads in parts): the first half of the values by the caller,
#: the second by the next thread of torch's team (a tensor may be cut in
#: two). One core reads ~10 GB/s here. The MLP's 33 MB of gradients after a
#: backward (2026-12-05, wall, medians of 40): 2.53 -> 1.62 ms under
#: OpenMP's default wait policy, 2.54 -> 1.68 ms under ``PASSIVE``. (Read
#: by a thread of the kernel's own, started for the call, as until then:
#: 2.34 -> 2.58 ms under the default policy, slower than one core, for
#: torch's spinning thread held the second core; 2.33 -> 1.57 ms under
#: ``PASSIVE``, the benchmarks' setting, which had hidden it.)
NORMS_SPLIT_ELEMENTS = 1 << 20


def norms(tensors: list) -> torch.Tensor | None:
    """The L2 norm of each of ``tensors`` as one float32 CPU tensor, in one
    call: for many small tensors (a model's gradients), where
    ``torch._foreach_norm`` costs about 3 us of dispatch each on the CPU and
    returns one 0-d tensor each to stack. None unless every one is a
    contiguous or channels_last float32, bfloat16 or float16 CPU tensor (a
    plain one or a Parameter), with at most :data:`MAX_ELEMENTS` values in
    all and, with more than :data:`NORMS_FEW_THREADS` of torch's threads,
    :data:`NORMS_MEAN_ELEMENTS` on average. A bfloat16 or float16 tensor's
    squares add up in float as a float32 one's: its norm is not rounded to
    its type, as torch's is."""
    if not _enabled or not tensors:
        return None
    fn = _norms if _norms is not None else (_load() and _norms)
    if not fn:
        return None
    # C-level passes (this runs over every parameter at every step); the
    # layout first: is_contiguous() raises on a sparse tensor.
    if not (
        all(map(_PLAIN.__contains__, map(type, tensors)))
        and all(map(is_, map(_LAYOUT, tensors), repeat(torch.strided)))
        and all(map(_IS_CPU, tensors))
        and (all(map(torch.Tensor.is_contiguous, tensors)) or all(map(_dense, tensors)))
    ):
        return None
    if all(map(is_, map(_DTYPE, tensors), repeat(torch.float32))):
        kinds = None  # (the common case: one pass)
    elif all(map(_KERNEL_DTYPES.__contains__, map(_DTYPE, tensors))):
        kinds = np.fromiter(map(KINDS.__getitem__, map(_DTYPE, tensors)), dtype=np.int8, count=len(tensors))
    else:
        return None
    lens = np.fromiter(map(torch.Tensor.numel, tensors), dtype=np.int64, count=len(tensors))
    if not _norms_take(lens):
        return None
    ptrs = np.fromiter(map(torch.Tensor.data_ptr, tensors), dtype=np.uint64, count=len(tensors))
    return torch.from_numpy(_norms_of(ptrs, lens, kinds))


def norms_at(ptrs: np.ndarray, lens: np.ndarray, kinds: np.ndarray | None = None) -> torch.Tensor | None:
    """:func:`norms` of CPU arrays given by their addresses (uint64) and
    sizes (int64), of the :data:`KINDS` ``kinds`` gives (an int8 array, or
    None: all float32), which the caller keeps alive during the call
    (``grad_reader``); None where :func:`norms` would not take them."""
    host = norms_at_host(ptrs, lens, kinds)
    return None if host is None else torch.from_numpy(host)


def norms_at_host(
    ptrs: np.ndarray, lens: np.ndarray, kinds: np.ndarray | None = None, scale: float | None = None
) -> np.ndarray | None:
    """:func:`norms_at`'s values as a float32 numpy array: for a caller that
    keeps them on the host (the gradient norms of a step: a tensor made of
    them would be reshaped, concatenated and read back, torch ops whose code
    has gone cold since the last step). ``scale``: gradients that still
    carry a GradScaler's scale, whose norms are divided by it before they
    are rounded to float32 (near the scale's ceiling a finite gradient's
    scaled norm is beyond float32's range)."""
    if not _enabled or not len(lens):
        return None
    if not (_norms if _norms is not None else (_load() and _norms)) or not _norms_take(lens):
        return None
    ptrs, lens = np.ascontiguousarray(ptrs, dtype=np.uint64), np.ascontiguousarray(lens, dtype=np.int64)
    return _norms_of(ptrs, lens, kinds if kinds is not None and kinds.any() else None, scale)


def _norms_take(lens: np.ndarray) -> bool:
    total = int(lens.sum())
    if total > MAX_ELEMENTS:
        return False
    return total <= NORMS_MEAN_ELEMENTS * len(lens) or torch.get_num_threads() <= NORMS_FEW_THREADS


def _norms_of(ptrs: np.ndarray, lens: np.ndarray, kinds: np.ndarray | None, scale: float | None = None) -> np.ndarray:
    """The norms, float32 (as torch's of float32 tensors), divided by
    ``scale`` first where one is given."""
    first = 0 if kinds is None else int(kinds[0])
    if kinds is None or (kinds == first).all():
        out = _norms_of_one_kind(ptrs, lens, first)
    else:  # (bfloat16 weights beside float32 ones: each kind in its own call)
        out = np.empty(len(lens))
        for kind in np.unique(kinds).tolist():
            idx = np.flatnonzero(kinds == kind)
            out[idx] = _norms_of_one_kind(np.ascontiguousarray(ptrs[idx]), np.ascontiguousarray(lens[idx]), kind)
    if scale is not None:
        out /= scale
    with np.errstate(over="ignore"):  # a norm above float32's range is inf, as torch's; no warning in training
        return out.astype(np.float32)


def _norms_of_one_kind(ptrs: np.ndarray, lens: np.ndarray, kind: int) -> np.ndarray:
    """The norms (float64) of arrays of values of one of the :data:`KINDS`;
    from :data:`NORMS_SPLIT_ELEMENTS` float32 values' bytes on two cores."""
    total = int(lens.sum())
    if total * _KIND_SIZE[kind] >= 4 * NORMS_SPLIT_ELEMENTS and _norms2 and torch.get_num_threads() > 1:
        return _norms_on_two_cores(ptrs, lens, total, kind)
    out = np.empty(len(lens))
    (_norms, _norms_bf16, _norms_f16)[kind](ptrs.ctypes.data, lens.ctypes.data, len(lens), out.ctypes.data)
    return out


def helper_seconds() -> float:
    """CPU seconds that threads other than the caller's (torch's intra-op
    threads) have used in the kernel's reads in parts (:func:`norms` on two
    cores, :func:`moments` of 2 MB or more) in this process so far: the
    writer's own, as its threads' (benchmarks add it to theirs); 0.0 without
    the kernel."""
    return float(_helper_seconds()) if _fn and _helper_seconds else 0.0


def reads_in_parts() -> bool:
    """Whether the kernel cuts large reads into parts on torch's intra-op
    threads (:data:`PART_ELEMENTS`): built with OpenMP, sharing torch's
    runtime, and not switched off (loads the kernel)."""
    return available() and _shared_openmp and _in_parts


def set_reads_in_parts(on: bool) -> None:
    """Cut large reads into parts on torch's threads (the default, where the
    kernel shares torch's OpenMP runtime) or read on one core (benchmarks and
    tests compare the two)."""
    global _in_parts
    _in_parts = bool(on)
    if _set_parts is not None:
        _set_parts(int(_shared_openmp and _in_parts))


def _norms_on_two_cores(ptrs: np.ndarray, lens: np.ndarray, total: int, kind: int) -> np.ndarray:
    """The norms of arrays of values of a kind (addresses, lengths) by
    ``nd_norms2``, cut at the half of the values: the array that holds the
    half-way value is read as two (its two norms joined after)."""
    half = total // 2
    ends = np.cumsum(lens)
    i = int(np.searchsorted(ends, half, side="right"))  # the array holding value number `half`
    inside = half - int(ends[i] - lens[i])  # its values before the cut
    if inside:
        ptrs = np.insert(ptrs, i + 1, ptrs[i] + np.uint64(_KIND_SIZE[kind] * inside))
        lens = np.insert(lens, i + 1, lens[i] - inside)
        lens[i] = inside
        cut = i + 1
    else:
        cut = i
    out = np.empty(len(lens))
    _norms2(ptrs.ctypes.data, lens.ctypes.data, len(lens), cut, kind, out.ctypes.data)
    if inside:
        out[i] = math.hypot(out[i], out[i + 1])
        out = np.delete(out, i + 1)
    return out


# -- loading (kernel_build.py builds and checks it) ------------------------------------


def _load():
    global _fn, _fn_bf16, _fn_f16, _hist, _hist_known, _hist_known_bf16, _hist_known_f16
    global _norms, _norms_bf16, _norms_f16, _norms2, _sum, _finite
    global _helper_seconds, _shared_openmp, _set_parts
    if _fn is not None:
        return _fn or None
    with _lock:
        if _fn is None:
            fn = None
            if os.environ.get(ENV, "1").strip() != "0":
                try:
                    lib = kernel_build.build_and_check()
                except Exception as e:  # noqa: BLE001 -- never fatal: torch's ops instead
                    log.info("tb_neuraldbg: the fused CPU statistics are not used (%s); torch's ops instead", e)
                else:
                    _hist, _hist_known, _norms, _norms2 = lib.hist, lib.hist_known, lib.norms, lib.norms2
                    _norms_bf16, _norms_f16 = lib.norms_bf16, lib.norms_f16
                    _sum, _finite, _helper_seconds = lib.sum, lib.finite, lib.helper_seconds
                    _shared_openmp, _set_parts = lib.shared_openmp, lib.set_parts
                    _set_parts(int(_shared_openmp and _in_parts))
                    _fn_bf16, _hist_known_bf16 = lib.moments_bf16, lib.hist_known_bf16
                    _fn_f16, _hist_known_f16 = lib.moments_f16, lib.hist_known_f16
                    fn = lib.moments
            _fn = fn if fn is not None else False
    return _fn or None
