"""Building, loading and checking the CPU kernel (``moments.c``) that
:mod:`cpu_kernel` calls.

It is compiled at first use with the machine's C compiler (``$CC``, else
``cc``) into a private per-user cache, loaded through ctypes and checked
against known answers before it is used: a compiler that miscompiles the
loops must not give wrong statistics. Built with OpenMP, its large reads
run in parts on torch's intra-op threads, where its runtime is the one
torch's ops use (checked here too).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import math
import os
import platform
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = ["PART_ELEMENTS", "Library", "build_and_check", "cache_dir", "compile_once", "temporary_file"]

log = logging.getLogger(__name__)

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "moments.c")
# The first links the OpenMP runtime by its soname (libgomp.so.1), which is
# torch's already loaded copy (checked: _shares_torchs_openmp); the second,
# a compiler without OpenMP's runtime; the third, without its simd pragma.
_FLAGS = (["-O3", "-fopenmp"], ["-O3", "-fopenmp-simd"], ["-O2"])

#: The least part of a read in parts (``PART_MIN`` in moments.c; see
#: cpu_kernel.PART_ELEMENTS).
PART_ELEMENTS = 1 << 18


class Library(NamedTuple):
    """The loaded kernel's functions (ctypes), and whether its OpenMP
    runtime is torch's (``set_parts`` turns its reads in parts on and off)."""

    moments: Any
    moments_bf16: Any
    moments_f16: Any
    hist: Any
    hist_known: Any
    hist_known_bf16: Any
    hist_known_f16: Any
    norms: Any
    norms_bf16: Any
    norms_f16: Any
    norms2: Any
    sum: Any
    finite: Any
    helper_seconds: Any
    set_parts: Any
    shared_openmp: bool


def cache_dir() -> str:
    """A directory only this user can write to (a library loaded from a
    directory others can write to would run their code)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for root in (os.path.join(base, "tb_neuraldbg"), os.path.join(tempfile.gettempdir(), f"tb_neuraldbg-{os.getuid()}")):
        path = os.path.join(root, "kernels")
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            st = os.stat(path)
            if st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return path
        except OSError:
            continue
    raise RuntimeError("no private cache directory to build it in")


def build_and_check() -> Library:
    """Compiles moments.c where the cache has no copy for this source and
    compiler, loads it, checks it against known answers and finds whether
    its reads in parts can run on torch's threads; raises where any step
    fails (the caller then uses torch's ops)."""
    if sys.platform == "win32" or not hasattr(os, "getuid"):
        raise RuntimeError("not built on this platform")
    with open(_SOURCE, "rb") as f:
        source = f.read()
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise RuntimeError("no C compiler (cc) found")
    tag = hashlib.sha256(source + cc.encode() + platform.machine().encode()).hexdigest()[:16]
    path = os.path.join(cache_dir(), f"moments-{tag}.so")
    if not os.path.exists(path):
        _compile(cc, path)
    lib = ctypes.CDLL(path)
    fn = lib.nd_moments_f32
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    bf16, f16 = lib.nd_moments_bf16, lib.nd_moments_f16
    bf16.argtypes, bf16.restype = f16.argtypes, f16.restype = fn.argtypes, fn.restype
    hist = lib.nd_hist_f32
    hist.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    hist.restype = ctypes.c_int
    hist_known = lib.nd_hist_known_f32
    hist_known.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
    hist_known.restype = ctypes.c_int
    hist_known_bf16, hist_known_f16 = lib.nd_hist_known_bf16, lib.nd_hist_known_f16
    for h in (hist_known_bf16, hist_known_f16):
        h.argtypes, h.restype = hist_known.argtypes, hist_known.restype
    many = lib.nd_norms_f32
    many.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    many.restype = ctypes.c_int
    many_bf16, many_f16 = lib.nd_norms_bf16, lib.nd_norms_f16
    for m in (many_bf16, many_f16):
        m.argtypes, m.restype = many.argtypes, many.restype
    many2 = lib.nd_norms2
    many2.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_void_p]
    many2.restype = ctypes.c_int
    total = lib.nd_sum_f32
    total.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    total.restype = ctypes.c_double
    finite = lib.nd_finite_f32
    finite.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    finite.restype = ctypes.c_int
    helper = lib.nd_helper_seconds
    helper.argtypes = []
    helper.restype = ctypes.c_double
    in_parts = lib.nd_set_parts_enabled
    in_parts.argtypes = [ctypes.c_int]
    in_parts.restype = None
    shared = _shares_torchs_openmp(lib)
    in_parts(int(shared))
    _check(fn, hist, many, many2, total, finite, hist_known)
    _check_16_bit(1, bf16, hist_known, hist_known_bf16)
    _check_16_bit(2, f16, hist_known, hist_known_f16)
    _check_norms_16(1, many_bf16, many2)
    _check_norms_16(2, many_f16, many2)
    if shared and not _parts_agree(fn, hist_known, in_parts):
        log.info("tb_neuraldbg: the CPU kernel's reads in parts failed their check; its reads stay on one core")
        shared = False
    in_parts(0)  # (until the caller sets it)
    return Library(fn, bf16, f16, hist, hist_known, hist_known_bf16, hist_known_f16, many, many_bf16, many_f16,
                   many2, total, finite, helper, in_parts, shared)


def _shares_torchs_openmp(lib) -> bool:
    """Whether the library was built with OpenMP and bound to the runtime
    torch's own ops use (the same ``omp_get_max_threads``): then its reads in
    parts run on torch's intra-op threads. A second runtime (torch built with
    another one, or none) would start threads of its own: then one core."""
    entry = lib.nd_openmp_entry
    entry.argtypes = []
    entry.restype = ctypes.c_void_p
    ours = entry()
    if not ours:
        return False
    try:
        torch_cpu = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        theirs = ctypes.cast(torch_cpu.omp_get_max_threads, ctypes.c_void_p).value
    except (OSError, AttributeError):  # another layout, or a torch without OpenMP
        return False
    if ours != theirs:
        log.info("tb_neuraldbg: the CPU kernel's OpenMP runtime is not torch's; its reads stay on one core")
    return ours == theirs


#: A build writes into a temporary file, renamed into place when done: a
#: builder killed during a build (the machine shut down) leaves it behind,
#: so a later build removes those older than :data:`_STALE_SECONDS` (older
#: builds named them ``tmp*.so``, and left one whenever their process ended
#: first).
_BUILDING = ".building-"
_STALE_SECONDS = 3600


def temporary_file(path: str) -> str:
    """A new empty file beside ``path`` for a build to write, then rename to
    ``path``; first removes what unfinished builds left there."""
    directory = os.path.dirname(path)
    stale = time.time() - _STALE_SECONDS
    for entry in os.scandir(directory):
        name = entry.name
        if not (name.startswith(_BUILDING) or (name.startswith("tmp") and name.endswith(".so"))):
            continue
        try:
            if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < stale:
                os.unlink(entry.path)
        except OSError:  # (another process removed it, or it is not ours to remove)
            pass
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=_BUILDING, suffix=os.path.splitext(path)[1])
    os.close(fd)
    return tmp


# The builder: a Python without imports of ours (no torch: 20 ms to start)
# that runs the compile commands in turn until one succeeds, renames its
# output into place, and prints the last error line of the last one else.
# It holds the build's lock (an inherited descriptor) for as long as it runs.
_BUILDER = r"""
import json, os, subprocess, sys
commands, tmp, path, timeout = json.loads(sys.argv[1])
err = "no command"
try:
    for cmd in commands:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if r.returncode == 0:
            os.replace(tmp, path)
            sys.exit(0)
        err = ((r.stderr or r.stdout).strip().splitlines() or ["exit %d" % r.returncode])[-1]
except subprocess.TimeoutExpired:
    err = "no answer in %d s" % timeout
finally:
    if os.path.exists(tmp):
        os.unlink(tmp)
sys.stderr.write(err)
sys.exit(1)
"""


def compile_once(path: str, commands, timeout: float) -> None:
    """Builds ``path`` (a library in :func:`cache_dir`) with the first of
    ``commands(tmp)`` (compiler command lines that write the file ``tmp``)
    that succeeds; raises RuntimeError with the compiler's last error line
    when none does. One build of a path at a time on the machine.

    Without the lock, every process that starts before the first build is
    done runs its own (the ranks of one node, a test suite's subprocesses, a
    sweep): seen here, 40 compiles of grads.cpp at once, 1 GB each, which
    filled the memory. A process that finds the lock held waits for it (at
    most ``timeout`` and a minute), then loads what that build made. The
    build runs in a builder process that holds the lock and renames its
    output itself, so it lands even when the process that started it ends
    first (a short script, a test): the next one loads it instead of
    starting over. Into a temporary name, then renamed: no process ever
    loads a half-written file."""
    import fcntl  # (POSIX; here, not at the top: the package imports on Windows, where nothing is built)

    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout + 60
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"another process has been building {os.path.basename(path)} "
                                       f"for over {timeout + 60:.0f} s") from None
                time.sleep(0.2)
        if os.path.exists(path):  # (built while we waited)
            return
        tmp = temporary_file(path)
        spec = json.dumps([commands(tmp), tmp, path, timeout])
        r = subprocess.run([sys.executable, "-c", _BUILDER, spec], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, pass_fds=(fd,))
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}")
    finally:
        os.close(fd)


def _compile(cc: str, path: str) -> None:
    try:
        compile_once(path, lambda tmp: [[cc, *flags, "-shared", "-fPIC", "-o", tmp, _SOURCE, "-lm"] for flags in _FLAGS], 60)
    except RuntimeError as e:
        raise RuntimeError(f"{os.path.basename(cc)} failed: {e}") from None


def _numpy_moments(v: np.ndarray) -> list[float]:
    """What the kernel's moments of the batched float32 array ``v`` are, by
    numpy, in its order (without the saturated count)."""
    return [
        float(v.min()), float(v.max()), float(v.sum(dtype=np.float64)),
        math.sqrt(float((v.astype(np.float64) ** 2).sum())), float(np.count_nonzero(v)), 0.0,
        float((~v.any(axis=0)).sum()),
    ]


def _check(fn, hist, many, many2, total, finite, hist_known) -> None:
    """Known answers, on sizes that cross a vector and a block boundary: a
    compiler that miscompiles the loops must not give wrong statistics."""
    rows, units = 3, 4099
    x = np.zeros((rows, units), dtype=np.float32)
    x[0, ::2] = np.arange(1, units // 2 + 2, dtype=np.float32)[: len(x[0, ::2])]
    x[1, 1] = -2.0
    x[2, units - 1] = 0.5
    want = _numpy_moments(x)
    out = np.empty(8)
    alive = np.empty(units, dtype=np.int32)
    # (saturated: |v - 1000| >= 999.5: up to 0.5, the zeros too, and from 1999.5)
    bounds = np.array([1000.0, 999.5, -1.0], dtype=np.float32)
    want.append(float((np.abs(x - np.float32(1000.0)) >= np.float32(999.5)).sum()))
    if fn(x.ctypes.data, x.size, units, alive.ctypes.data, bounds.ctypes.data, out.ctypes.data) != 0:
        raise RuntimeError("the kernel refused its check")
    if not np.allclose(out, want, rtol=1e-6, atol=0):
        raise RuntimeError(f"the kernel's check failed: {out.tolist()} against {want}")
    y = np.array([1.0, np.inf, -np.inf, 0.0, np.nan], dtype=np.float32)
    top = np.array([1.0, 0.0, 1.0], dtype=np.float32)  # v >= 1: 1.0 and inf
    if fn(y.ctypes.data, y.size, 0, None, top.ctypes.data, out.ctypes.data) != 0:
        raise RuntimeError("the kernel refused its check")
    if not (math.isnan(out[0]) and math.isnan(out[2]) and out[4] == 4 and out[5] == 3 and out[6] == -1
            and out[7] == 2):
        raise RuntimeError(f"the kernel's non-finite check failed: {out.tolist()}")
    if fn(y.ctypes.data, y.size, 0, None, None, out.ctypes.data) != 0 or out[7] != -1:
        raise RuntimeError(f"the kernel's check failed: {out.tolist()}")
    z = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 4.0], dtype=np.float32)  # every other value: 0, 2, 4
    h = np.empty(4 + 5)
    if hist(z.ctypes.data, 3, 2, 4, h.ctypes.data) != 0 or h.tolist() != [1, 0, 1, 1, 0, 0, 4, 6, 20]:
        raise RuntimeError(f"the kernel's histogram check failed: {h.tolist()}")
    if hist(y.ctypes.data, y.size, 1, 4, h.ctypes.data) != 1:
        raise RuntimeError("the kernel's histogram took a non-finite value")
    known = np.array([0.0, 4.0, 14.0, 46.0])  # z's min, max, sum, sum of squares
    h2 = np.empty(6 + 5)
    hist(z.ctypes.data, z.size, 1, 6, h2.ctypes.data)
    h3 = np.empty(6 + 5)
    if hist_known(z.ctypes.data, z.size, 6, known.ctypes.data, h3.ctypes.data) != 0 or h3.tolist() != h2.tolist():
        raise RuntimeError(f"the kernel's histogram of known bounds failed its check: {h3.tolist()}")
    arrays = [x[0], x[1], z]
    ptrs = np.array([a.ctypes.data for a in arrays], dtype=np.uint64)
    lens = np.array([a.size for a in arrays], dtype=np.int64)
    got = np.empty(3)
    many(ptrs.ctypes.data, lens.ctypes.data, 3, got.ctypes.data)
    want = [math.sqrt(float((a.astype(np.float64) ** 2).sum())) for a in arrays]
    if not np.allclose(got, want, rtol=1e-6, atol=0):
        raise RuntimeError(f"the kernel's norms check failed: {got.tolist()} against {want}")
    got[:] = np.nan
    cut_ok = many2(ptrs.ctypes.data, lens.ctypes.data, 3, 1, 0, got.ctypes.data) in (0, 1)  # (1: read on one core)
    if not (cut_ok and np.allclose(got, want, rtol=1e-6, atol=0)):
        raise RuntimeError(f"the kernel's two-core norms check failed: {got.tolist()} against {want}")
    summed, poisoned = total(x.ctypes.data, x.size), total(y.ctypes.data, y.size)
    if not (math.isclose(summed, float(x.sum(dtype=np.float64)), rel_tol=1e-6) and math.isnan(poisoned)):
        raise RuntimeError("the kernel's sum check failed")
    big = np.full(5000, 3e38, dtype=np.float32)  # finite, though their sum is not
    if finite(big.ctypes.data, big.size) != 1 or any(finite(y[i:].ctypes.data, 1) for i in (1, 2, 4)):
        raise RuntimeError("the kernel's finite check failed")
    big[4097] = np.nan
    if finite(big.ctypes.data, big.size) != 0 or finite(y.ctypes.data, 1) != 1:
        raise RuntimeError("the kernel's finite check failed")


def _as_bf16(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 values cut to bfloat16: their bit patterns (uint16), and the
    values they hold as float32."""
    h = (x.view(np.uint32) >> 16).astype(np.uint16)
    return h, (h.astype(np.uint32) << 16).view(np.float32)


def _as_f16(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 values rounded to float16 (numpy rounds as c10::Half): their
    bit patterns (uint16), and the values they hold as float32."""
    with np.errstate(over="ignore"):
        h = x.astype(np.float16)
    return h.view(np.uint16), h.astype(np.float32)


def _check_norms_16(kind: int, norms, norms2) -> None:
    """Known answers of the norms of 16-bit values (``kind`` 1 bfloat16, 2
    float16: :data:`_16_BIT`): normed as the floats they hold, in one call
    and in two parts; squares beyond float32's range (bfloat16's 1e20) still
    finite, a NaN and an inf kept, squares below its smallest not 0."""
    cut_to = _16_BIT[kind][1]
    x = np.linspace(-3.0, 3.0, 9001, dtype=np.float32)
    x[17] = 1e20 if kind == 1 else 6e4
    y = np.array([1.0, np.inf, 2.0, np.nan, 1e-30 if kind == 1 else 1e-7], dtype=np.float32)
    arrays = [cut_to(a)[0] for a in (x[:4100], x[4100:], y[:3], y[3:], y[4:])]
    floats = [cut_to(a)[1].astype(np.float64) for a in (x[:4100], x[4100:], y[:3], y[3:], y[4:])]
    want = [math.sqrt(float((f**2).sum())) for f in floats]
    ptrs = np.array([a.ctypes.data for a in arrays], dtype=np.uint64)
    lens = np.array([a.size for a in arrays], dtype=np.int64)
    for cut in (None, 1, 3):
        got = np.full(len(arrays), -1.0)
        if cut is None:
            norms(ptrs.ctypes.data, lens.ctypes.data, len(arrays), got.ctypes.data)
        elif norms2(ptrs.ctypes.data, lens.ctypes.data, len(arrays), cut, kind, got.ctypes.data) not in (0, 1):
            raise RuntimeError("the kernel refused its 16-bit norms check")
        if not (np.allclose(got, want, rtol=1e-6, atol=0, equal_nan=True) and np.isfinite(got[0]) and got[4] > 0):
            raise RuntimeError(f"the kernel's 16-bit norms check failed ({kind}): {got.tolist()} against {want}")


#: The 16-bit kinds' known answers: (name, cut_to, the type's nearest value
#: to 0.99 and the one under it, values of its own, bit patterns of 1, inf,
#: -inf, 0 and a NaN).
_16_BIT = {
    1: ("bfloat16", _as_bf16, (0.98828125, 0.984375), (), (0x3F80, 0x7F80, 0xFF80, 0x0000, 0x7FC0)),
    2: ("float16", _as_f16, (0.990234375, 0.98974609375), (3e-8, -6e-5, 65504.0),  # (subnormal, its largest)
        (0x3C00, 0x7C00, 0xFC00, 0x0000, 0x7E00)),
}


def _check_16_bit(kind: int, fn, hist_known, hist_known_16) -> None:
    """Known answers of the moments of 16-bit values (``kind`` 1 bfloat16, 2
    float16): float32 values cut to the type, read as those floats; the
    saturated ones as torch's ops count a tensor of that type's (the bound
    0.99 rounded to the type: its nearest value is saturated, the one under
    it is not); the histogram the float32 copy's; NaN and inf counted."""
    name, cut_to, (at, under), own, specials = _16_BIT[kind]
    units = 4099
    x = np.zeros((3, units), dtype=np.float32)
    x[0, ::3] = np.linspace(-3.0, 3.0, len(x[0, ::3]), dtype=np.float32)
    x[1, 5], x[1, 6], x[2, units - 1] = at, under, -1.0
    x[2, 7:7 + len(own)] = own
    h, v = cut_to(x)
    want = _numpy_moments(v) + [float((np.abs(v) >= np.float32(at)).sum())]
    out = np.empty(8)
    alive = np.empty(units, dtype=np.int32)
    bounds = np.array([0.0, 0.99, -1.0], dtype=np.float32)
    if fn(h.ctypes.data, h.size, units, alive.ctypes.data, bounds.ctypes.data, out.ctypes.data) != 0:
        raise RuntimeError(f"the kernel refused its {name} check")
    if not np.allclose(out, want, rtol=1e-6, atol=0):
        raise RuntimeError(f"the kernel's {name} check failed: {out.tolist()} against {want}")
    known = np.array([out[0], out[1], out[2], out[3] ** 2])
    bins, bins_f32 = np.empty(16 + 5), np.empty(16 + 5)
    hist_known_16(h.ctypes.data, h.size, 16, known.ctypes.data, bins.ctypes.data)
    hist_known(v.ctypes.data, v.size, 16, known.ctypes.data, bins_f32.ctypes.data)
    if bins.tolist() != bins_f32.tolist() or bins[:16].sum() != v.size:
        raise RuntimeError(f"the kernel's {name} histogram check failed: {bins.tolist()}")
    y = np.array(specials, dtype=np.uint16)  # 1, inf, -inf, 0, NaN
    top = np.array([1.0, 0.0, 1.0], dtype=np.float32)
    if fn(y.ctypes.data, y.size, 0, None, top.ctypes.data, out.ctypes.data) != 0 or not (
        math.isnan(out[0]) and math.isnan(out[2]) and out[4] == 4 and out[5] == 3 and out[7] == 2
    ):
        raise RuntimeError(f"the kernel's {name} non-finite check failed: {out.tolist()}")


def _parts_agree(fn, hist_known, in_parts) -> bool:
    """Whether a read in parts gives what one read gives: a batched tensor
    of three parts' size whose units are alive in one part each (the others
    dead), its saturated values (``|v| >= 1``) in two parts, its histogram
    (each bin's values in one part), and the same values with a NaN in the
    last part."""
    rows, units = 6, PART_ELEMENTS // 2
    x = np.zeros((rows, units), dtype=np.float32)
    x[0, 0], x[3, 1], x[5, 2], x[4, units - 1] = 1.0, -2.0, 3.0, 0.25
    flat = x.reshape(-1).copy()
    flat[-1] = np.nan
    alive = np.empty(units, dtype=np.int32)
    bounds = np.array([0.0, 1.0, -1.0], dtype=np.float32)
    got = []
    for on in (0, 1):
        in_parts(on)
        out = np.empty(8)
        fn(x.ctypes.data, x.size, units, alive.ctypes.data, bounds.ctypes.data, out.ctypes.data)
        out2 = np.empty(8)
        fn(flat.ctypes.data, flat.size, 0, None, None, out2.ctypes.data)
        known = np.array([-2.0, 3.0, 2.25, 14.0625])
        bins = np.empty(5 + 5)
        hist_known(x.ctypes.data, x.size, 5, known.ctypes.data, bins.ctypes.data)
        got.append((out.tolist(), out2.tolist(), bins.tolist()))
    (one, one_nan, one_bins), (parts, parts_nan, parts_bins) = got
    want = [-2.0, 3.0, 2.25, math.sqrt(14.0625), 4.0, 0.0, float(units - 4), 3.0]
    want_bins = [1.0, 0.0, x.size - 3.0, 1.0, 1.0, 0.0, *known]  # bins of 1 from -2: -2 | | 0, 0.25 | 1 | 3
    return (
        one == parts == want and np.allclose(parts_nan, one_nan, equal_nan=True) and parts_nan[5] == 1.0
        and one_bins == parts_bins == want_bins
    )
