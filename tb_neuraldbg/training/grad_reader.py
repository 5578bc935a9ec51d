"""The parameters' gradients read in one C++ call (``grads.cpp``): the
addresses and sizes that :func:`cpu_kernel.norms_at` takes, without a
Python object nor seven Python passes per gradient.

On a 1,000-module model that is 1,502 gradients at every step: in Python,
``p.grad`` then the checks that the kernel needs (type, layout, dtype,
device, contiguity, size, address) cost 2-3 ms after a backward, more than
the norms' read itself; the C++ reader 0.3 ms. The same extension reads a
full step's module input and output through the fused kernel in one call
(:func:`measure_fn`): the checks and ctypes calls it saves cost more than
the kernel's read of a small activation.

It is built against the installed torch's own headers with the machine's
C++ compiler (``$CXX``, else ``c++``/``g++``) into the fused kernel's
per-user cache (one build per torch version and source, about 10 s) on a
background thread started by :func:`start`: until it is loaded (or where
it cannot be: no compiler, no headers, ``TB_NEURALDBG_CPU_KERNEL=0``) the
gradients are read in Python (and the activations through ctypes), with
the same results. It is checked against Python's answers before it is used.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import platform
import shutil
import sys
import sysconfig
import threading

import numpy as np
import torch

from . import cpu_kernel, kernel_build

__all__ = ["Read", "all_require_grad", "marks", "measure_fn", "read", "read_data", "start", "wait"]

log = logging.getLogger(__name__)

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grads.cpp")
_STDS = ("c++20", "c++17")

_lock = threading.Lock()
_thread: threading.Thread | None = None
_module = None  # the loaded extension, once built and checked
_measure = None  # its measure(), once the fused kernel is set in it and checked
_local = threading.local()  # each thread's arrays, by length (reused from step to step)

# Status codes of grads.cpp: float32 values, none, any other, bfloat16 values, float16 values.
OK, NONE, OTHER, BF16, F16 = 0, 1, 2, 3, 4
_KIND_OF_STATUS = np.array([0, 0, 0, 1, 2], dtype=np.int8)  # (cpu_kernel.KINDS' numbers)


class Read:
    """One reading of the gradients of ``params``: ``ptrs``, ``lens`` and
    ``status`` (arrays of len(params): :data:`OK` float32 values,
    :data:`BF16` bfloat16 ones, :data:`F16` float16 ones, :data:`NONE`);
    keeps the gradients alive while it is held (``holder``). Its arrays are
    reused by the thread's next reading of as many tensors: use them
    before."""

    __slots__ = ("ptrs", "lens", "status", "holder")

    def __init__(self, ptrs, lens, status, holder):
        self.ptrs, self.lens, self.status, self.holder = ptrs, lens, status, holder

    def kinds(self, keep: np.ndarray | None = None) -> np.ndarray | None:
        """The kinds of values of the tensors (of those at ``keep``,
        indices): :func:`cpu_kernel.norms_at`'s ``kinds``, or None where all
        are float32."""
        status = self.status if keep is None else self.status[keep]
        if (status == OK).all():
            return None
        return _KIND_OF_STATUS[status]


def start() -> None:
    """Build (or load from the cache) the reader on a background thread,
    once per process; returns at once. Nothing happens when the fused CPU
    kernel is turned off (``TB_NEURALDBG_CPU_KERNEL=0``)."""
    global _thread
    if _thread is not None or os.environ.get(cpu_kernel.ENV, "1").strip() == "0":
        return
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_load, name="tb_neuraldbg-build", daemon=True)
            _thread.start()


def wait(timeout: float | None = None) -> bool:
    """Start the build if needed and wait for it; True when the reader is
    loaded (tests, benchmarks)."""
    start()
    if _thread is not None:
        _thread.join(timeout)
    return _module is not None


def read(params: list) -> Read | None:
    """The gradients of ``params`` (a list of tensors), or None: the reader
    is not loaded (yet), or a gradient is not a dense float32, bfloat16 or
    float16 CPU tensor (contiguous or channels_last: grads.cpp's
    plain_float32; another dtype or device, a subclass, one that requires
    grad): read those in Python."""
    return _read("read", params)


def read_data(tensors: list) -> Read | None:
    """:func:`read` of the tensors' own values (status :data:`OK`,
    :data:`BF16` or :data:`F16` for each), or None, also when one is not a
    dense float32, bfloat16 or float16 CPU tensor."""
    return _read("read_data", tensors)


def _read(name: str, params: list) -> Read | None:
    mod = _module
    if mod is None or not cpu_kernel._enabled:
        return None
    n = len(params)
    buffers = getattr(_local, "buffers", None)
    if buffers is None:
        buffers = _local.buffers = {}
    bufs = buffers.get(n)
    if bufs is None:
        bufs = buffers[n] = (np.empty(n, np.uint64), np.empty(n, np.int64), np.empty(n, np.int8))
    ptrs, lens, status = bufs
    try:
        other, holder = getattr(mod, name)(params, ptrs.ctypes.data, lens.ctypes.data, status.ctypes.data)
    except (RuntimeError, TypeError):
        return None
    return Read(ptrs, lens, status, holder) if other == 0 else None


def marks(params: list) -> tuple[np.ndarray, np.ndarray] | None:
    """Each gradient's identity (uint64; 0: no gradient) and version counter
    (int64; -1: none), new arrays; None while the reader is not loaded.
    Comparable only with other marks of this function."""
    mod = _module
    if mod is None:
        return None
    ids, versions = np.empty(len(params), np.uint64), np.empty(len(params), np.int64)
    try:
        mod.marks(params, ids.ctypes.data, versions.ctypes.data)
    except (RuntimeError, TypeError):
        return None
    return ids, versions


def measure_fn():
    """The extension's ``measure(x, x_batched, y, y_dead, exact, bounds)`` (see
    grads.cpp: a module's input and output moments in one call, as a tuple in
    the order of ``instrument._FAST_KEYS``, or None where the kernel does not
    take one of them), or None while it is not loaded or the fused kernel is
    off (``cpu_kernel.set_enabled(False)``)."""
    return _measure if _module is not None and cpu_kernel._enabled else None


def all_require_grad(params: list) -> bool | None:
    """Whether every one of ``params`` requires grad; None while the reader
    is not loaded."""
    mod = _module
    if mod is None:
        return None
    try:
        return mod.all_require_grad(params)
    except TypeError:
        return None


# -- building and loading ---------------------------------------------------------


def _load() -> None:
    global _module, _measure
    try:
        mod = _build_and_check()
    except Exception as e:  # noqa: BLE001 -- never fatal: the gradients are read in Python
        log.info("tb_neuraldbg: the C++ gradient reader is not used (%s); Python reads them", e)
        return
    _module = mod
    try:
        _measure = _measure_with_kernel(mod)
    except Exception as e:  # noqa: BLE001 -- never fatal: the activations are measured through ctypes
        log.info("tb_neuraldbg: the C++ activation reads are not used (%s)", e)


def _measure_with_kernel(mod):
    """``mod.measure`` with the fused kernel's moments function set in it,
    checked against :func:`cpu_kernel.moments`; None without the kernel."""
    if not cpu_kernel.available():
        return None
    address = ctypes.cast(cpu_kernel._fn, ctypes.c_void_p).value
    address_bf16 = ctypes.cast(cpu_kernel._fn_bf16, ctypes.c_void_p).value
    address_f16 = ctypes.cast(cpu_kernel._fn_f16, ctypes.c_void_p).value
    mod.set_moments(address, address_bf16, address_f16, cpu_kernel.MAX_ELEMENTS)
    _check_measure(mod.measure)
    return mod.measure


def _torch_paths() -> tuple[str, str]:
    root = os.path.dirname(os.path.abspath(torch.__file__))
    include, lib = os.path.join(root, "include"), os.path.join(root, "lib")
    if not os.path.exists(os.path.join(include, "torch", "csrc", "autograd", "python_variable.h")):
        raise RuntimeError("torch's C++ headers are not installed")
    return include, lib


def _build_and_check():
    if sys.platform == "win32" or not hasattr(os, "getuid"):
        raise RuntimeError("not built on this platform")
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        raise RuntimeError("no C++ compiler found")
    include, lib = _torch_paths()
    with open(_SOURCE, "rb") as f:
        source = f.read()
    facts = "|".join((cxx, torch.__version__, include, sys.version, platform.machine()))
    tag = hashlib.sha256(source + facts.encode()).hexdigest()[:16]
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    path = os.path.join(kernel_build.cache_dir(), f"grads-{tag}{suffix}")
    if not os.path.exists(path):
        _compile(cxx, include, lib, path)
    spec = importlib.util.spec_from_file_location("_nd_grads", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _check(mod)
    return mod


def _compile(cxx: str, include: str, lib: str, path: str) -> None:
    # (kernel_build.compile_once: one build on the machine at a time, which
    # lands even when this process ends first); niced: it runs beside the
    # user's first steps.
    nice = [shutil.which("nice"), "-n", "10"] if shutil.which("nice") else []

    def commands(tmp: str) -> list[list[str]]:
        return [
            [
                *nice, cxx, "-O2", "-shared", "-fPIC", f"-std={std}", "-w",
                f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}",
                "-I", include, "-I", os.path.join(include, "torch", "csrc", "api", "include"),
                "-I", sysconfig.get_paths()["include"],
                _SOURCE, "-o", tmp, "-L", lib, "-ltorch_python", "-ltorch_cpu", "-lc10", f"-Wl,-rpath,{lib}",
            ]
            for std in _STDS
        ]

    try:
        kernel_build.compile_once(path, commands, 600)
    except RuntimeError as e:
        raise RuntimeError(f"{os.path.basename(cxx)} failed: {e}") from None


def _check(mod) -> None:
    """Known answers: each status, and addresses and sizes as torch gives them
    (on the CPU whatever the process's default device)."""
    cpu = torch.device("cpu")
    plain = torch.nn.Parameter(torch.zeros(3, 5, device=cpu))
    plain.grad = torch.arange(15, dtype=torch.float32, device=cpu).reshape(3, 5)
    missing = torch.nn.Parameter(torch.zeros(2, device=cpu))
    wide = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64, device=cpu))
    wide.grad = torch.ones(4, dtype=torch.float64, device=cpu)
    strided = torch.nn.Parameter(torch.zeros(4, 3, device=cpu))
    strided.grad = torch.ones(4, 6, device=cpu)[:, ::2]  # (not dense: every other value; a transposed one is read)
    last = torch.nn.Parameter(torch.zeros(2, 3, 2, 2, device=cpu))  # a conv's weight in channels_last
    last.grad = torch.ones(2, 3, 2, 2, device=cpu).to(memory_format=torch.channels_last)
    half = torch.nn.Parameter(torch.zeros(2, 2, dtype=torch.bfloat16, device=cpu))  # a model trained in bfloat16
    half.grad = torch.ones(2, 2, dtype=torch.bfloat16, device=cpu)
    f16 = torch.nn.Parameter(torch.zeros(3, dtype=torch.float16, device=cpu))  # in float16
    f16.grad = torch.ones(3, dtype=torch.float16, device=cpu)
    params = [plain, missing, strided, torch.zeros(1, device=cpu), wide, last, half, f16]
    ptrs, lens, status = np.empty(8, np.uint64), np.empty(8, np.int64), np.empty(8, np.int8)
    other, holder = mod.read(params, ptrs.ctypes.data, lens.ctypes.data, status.ctypes.data)
    want = [OK, NONE, OTHER, NONE, OTHER, OK, BF16, F16]
    if other != 2 or status.tolist() != want or holder is None:
        raise RuntimeError(f"the gradient reader's check failed: {status.tolist()} against {want}")
    if not (int(ptrs[0]) == plain.grad.data_ptr() and int(lens[0]) == 15
            and int(ptrs[5]) == last.grad.data_ptr() and int(lens[5]) == 24
            and int(ptrs[6]) == half.grad.data_ptr() and int(lens[6]) == 4
            and int(ptrs[7]) == f16.grad.data_ptr() and int(lens[7]) == 3):
        raise RuntimeError("the gradient reader's check failed: the address or the size")
    ids, versions = np.empty(3, np.uint64), np.empty(3, np.int64)
    mod.marks([plain, missing, wide], ids.ctypes.data, versions.ctypes.data)
    before = versions.copy()
    plain.grad.mul_(2.0)
    mod.marks([plain, missing, wide], ids.ctypes.data, versions.ctypes.data)
    if not (ids[0] and ids[2] and ids[0] != ids[2] and ids[1] == 0 and versions[1] == -1
            and versions[0] == before[0] + 1 and versions[2] == before[2]):
        raise RuntimeError(f"the gradient reader's marks check failed: {ids.tolist()}, {versions.tolist()}")
    other, holder = mod.read_data([plain, strided.grad, half], ptrs.ctypes.data, lens.ctypes.data,
                                  status.ctypes.data)
    if other != 1 or status[:3].tolist() != [OK, OTHER, BF16] or (int(ptrs[0]), int(lens[0])) != (plain.data_ptr(), 15):
        raise RuntimeError(f"the gradient reader's data check failed: {status[:3].tolist()}")
    frozen = torch.nn.Parameter(torch.zeros(1, device=cpu), requires_grad=False)
    if mod.all_require_grad([plain, wide]) is not True or mod.all_require_grad([plain, frozen]) is not False:
        raise RuntimeError("the gradient reader's requires_grad check failed")


class _Subclass(torch.Tensor):
    """A tensor subclass, which the activation reads leave to Python."""


def _check_measure(measure) -> None:
    """Known answers of ``measure``: :func:`cpu_kernel.moments`' values in
    the documented order, and None for what it does not take."""
    cpu = torch.device("cpu")
    x = torch.tensor([[1.0, 0.0, -2.0], [0.0, 0.0, 3.0]], device=cpu)
    y = torch.tensor([[0.5, float("nan")], [0.0, -4.0]], device=cpu)
    mx, my = cpu_kernel.moments(x, 3), cpu_kernel.moments(y, 2)
    top = cpu_kernel.saturation_bounds(None, 0.5)  # (0.5 saturated: 1 value)
    sat = cpu_kernel.moments(y, 0, top)[7]
    if sat != 1:
        raise RuntimeError(f"the activation reads' check failed: {sat} saturated values, not 1")
    for got, want in (
        (measure(x, True, y, True, True, None),
         [6.0, 3.0, mx[2], mx[4], mx[6], mx[5], 4.0, 2.0, *my[:5], my[6], my[5]]),
        (measure(None, False, y, False, False, None), [4.0, *my[:5]]),
        (measure(x, False, y, True, False, top), [6.0, mx[2], mx[4], 4.0, 2.0, *my[:5], my[6], sat]),
        # (a transposed matrix: the same values in another order; not as a
        # batch, whose samples are not blocks)
        (measure(None, False, y.t(), False, False, None), [4.0, *my[:5]]),
        # (bfloat16 and float16, a CPU autocast's: y's values are theirs)
        (measure(None, False, y.bfloat16(), True, False, None), [4.0, 2.0, *my[:5], my[6]]),
        (measure(None, False, y.half(), True, False, None), [4.0, 2.0, *my[:5], my[6]]),
    ):
        # (NaN where the kernel gives NaN: y holds one)
        if got is None or len(got) != len(want) or not all(a == b or (a != a and b != b) for a, b in zip(got, want)):
            raise RuntimeError(f"the activation reads' check failed: {got} against {want}")
    refused = [
        (x.double(), y), (x, y.t()), (x.as_subclass(_Subclass), y), (x[:0], y), (x, y[:1, :1]), (x, y[:, :1]),
    ]
    for a, b in refused:
        if measure(a, False, b, True, False, None) is not None:
            raise RuntimeError("the activation reads' check failed: a tensor the kernel does not take was read")
