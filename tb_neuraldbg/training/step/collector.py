"""One step's data on its way from the hooks to the worker.

The hooks add 0-d device tensors (and a few 1-d runs) to a :class:`Collector`
with the row and the :class:`slots.Key` each describes; at the step's end
:meth:`Collector.finish` stacks them once per device and dtype and starts one
host copy per device (non-blocking into pinned memory on CUDA), and the
result travels to the worker as a :class:`StepPacket`, whose
:meth:`StepPacket.host_values` waits for the copies on the worker's thread.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from .slots import StepPacket

__all__ = ["StepPacket", "Collector", "all_finite", "host_finite"]


class Collector:
    """Device values of one step, grouped by device, with their descriptions.

    Single values (0-d tensors, the bulk: one or more per hook call) are kept
    as they are and stacked once per device and dtype in :meth:`finish`:
    no per-value reshape. Runs (histograms) and pre-stacked groups are kept
    as 1-d tensors, their rows and keys as numpy arrays; host constants as
    Python numbers, or as arrays for many rows at once (:meth:`const_many`);
    values already on the host (a CPU loss read at the commit) as constants
    too, through :meth:`measured`, which notes a non-finite one for
    :func:`all_finite`.
    """

    __slots__ = ("by_device", "c_rows", "c_keys", "c_vals", "c_arrays", "c_nonfinite")

    def __init__(self):
        # device -> (scalar tensors, their rows, their keys, 1-d runs, rows arrays, keys arrays)
        self.by_device: dict[torch.device, tuple[list, list, list, list, list, list]] = {}
        self.c_rows: list[int] = []
        self.c_keys: list[int] = []
        self.c_vals: list[float] = []
        self.c_arrays: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.c_nonfinite = False  # a value given to measured() is NaN or inf

    def _slot(self, dev):
        d = self.by_device.get(dev)
        if d is None:
            d = self.by_device[dev] = ([], [], [], [], [], [])
        return d

    def add(self, t: torch.Tensor, row: int, key: int) -> None:
        d = self._slot(t.device)
        d[0].append(t if t.dim() == 0 else t.reshape(()))
        d[1].append(row)
        d[2].append(key)
        if len(d[0]) >= CHUNK:
            _stack_scalars(d)

    def add_row(self, row: int, keys: Sequence[int], tensors: Sequence[torch.Tensor]) -> None:
        """0-d tensors of one device for one row, ``keys[i]`` for
        ``tensors[i]`` (a module's statistics: one call, not one per value)."""
        d = self._slot(tensors[0].device)
        d[0].extend(tensors)
        d[1].extend([row] * len(tensors))
        d[2].extend(keys)
        if len(d[0]) >= CHUNK:
            _stack_scalars(d)

    def add_run(self, t: torch.Tensor, row: int, key: int) -> None:
        d = self._slot(t.device)
        d[3].append(t.reshape(-1))
        n = t.numel()
        d[4].append(np.full(n, row, dtype=np.int64))
        d[5].append(np.full(n, key, dtype=np.int64))

    def add_many(
        self, tensors: Sequence[torch.Tensor], rows: Sequence[int], key: int, divisor: torch.Tensor | None = None
    ) -> None:
        """0-d tensors (e.g. per-parameter norms), or a 1-d tensor of them
        (one device), stacked per device: one
        kernel per device instead of one entry each; ``divisor`` (a 0-d
        tensor, e.g. the GradScaler scale) divides them all at once."""
        if isinstance(tensors, torch.Tensor):  # already stacked (stats.stacked_norms)
            self.add_stacked(tensors, rows, key, divisor)
            return
        if not tensors:
            return
        dev0 = tensors[0].device
        if all(t.device == dev0 for t in tensors):
            groups = {dev0: (tensors, rows)}  # the common case: no regrouping
        else:
            groups = {}
            for t, r in zip(tensors, rows):
                ts, rs = groups.setdefault(t.device, ([], []))
                ts.append(t)
                rs.append(r)
        for dev, (ts, rs) in groups.items():
            self.add_stacked(torch.stack(list(ts)) if len(ts) > 1 else ts[0].reshape(1), rs, key, divisor)

    def add_stacked(
        self, values: torch.Tensor, rows: Sequence[int], key: int, divisor: torch.Tensor | None = None
    ) -> None:
        """A 1-d tensor of values (one device), one per entry of ``rows``."""
        if divisor is not None:
            values = values / divisor.to(values.device)
        d = self._slot(values.device)
        d[3].append(values.reshape(-1))
        d[4].append(np.asarray(rows, dtype=np.int64))
        d[5].append(np.full(len(rows), key, dtype=np.int64))

    def const(self, row: int, key: int, value: float) -> None:
        self.c_rows.append(row)
        self.c_keys.append(key)
        self.c_vals.append(float(value))

    def measured(self, row: int, keys: Sequence[int], values: Sequence[float]) -> None:
        """Statistics of one row measured on the host, ``keys[i]`` for
        ``values[i]``: kept as constants, and checked by :func:`all_finite`
        as the device values are."""
        self.c_rows.extend([row] * len(keys))
        self.c_keys.extend(keys)
        self.c_vals.extend(values)
        if not self.c_nonfinite and not all(map(math.isfinite, values)):
            self.c_nonfinite = True

    def const_many(self, rows: np.ndarray, key: int, values: np.ndarray) -> None:
        """Host values for many rows at once (numpy arrays of one length)."""
        rows = np.asarray(rows, dtype=np.int64)
        self.c_arrays.append((rows, np.full(len(rows), key, dtype=np.int64), np.asarray(values, dtype=np.float64)))

    def extend(self, other: "Collector") -> None:
        for dev, parts in other.by_device.items():
            d = self._slot(dev)
            for mine, theirs in zip(d, parts):
                mine.extend(theirs)
        self.c_rows.extend(other.c_rows)
        self.c_keys.extend(other.c_keys)
        self.c_vals.extend(other.c_vals)
        self.c_arrays.extend(other.c_arrays)
        self.c_nonfinite = self.c_nonfinite or other.c_nonfinite

    def compact(self) -> None:
        """Stack the 0-d values gathered so far into one run per device and
        dtype (one kernel each). :meth:`finish` does it; the step's check
        does it earlier, so that the values are stacked once, not once for
        the check and again at the end."""
        for d in self.by_device.values():
            if d[0]:
                _stack_scalars(d)

    def finish(self) -> tuple[list, np.ndarray, np.ndarray]:
        """One concatenation and one host copy per device; no waiting."""
        self.compact()
        host: list = []
        rows: list[np.ndarray] = []
        keys: list[np.ndarray] = []
        for dev, (_, _, _, rts, rrs, rks) in self.by_device.items():
            if not rts:
                continue
            if dev.type == "cpu":
                flat = _host_float64(rts)
                if flat is not None:
                    host.append(flat)
                    rows.extend(rrs)
                    keys.extend(rks)
                    continue
            wide = dev.type in ("cpu", "cuda")  # float64: counts above 2**24 stay exact
            by_dtype: dict[torch.dtype, list[int]] = {}
            for i, t in enumerate(rts):
                by_dtype.setdefault(t.dtype, []).append(i)
            # Concatenated per dtype first, then converted: one conversion
            # per dtype, not one per run (a step of 1,000 histograms).
            parts = []
            for idxs in by_dtype.values():
                parts.append(torch.cat([rts[i] for i in idxs]) if len(idxs) > 1 else rts[idxs[0]])
                rows.extend(rrs[i] for i in idxs)
                keys.extend(rks[i] for i in idxs)
            if wide:
                parts = [f if f.dtype == torch.float64 else f.to(torch.float64) for f in parts]
            flat = torch.cat(parts) if len(parts) > 1 else parts[0]
            if dev.type == "cuda":
                pinned = torch.empty(flat.shape, dtype=flat.dtype, device="cpu", pin_memory=True)
                pinned.copy_(flat, non_blocking=True)
                event = torch.cuda.Event()
                # On the stream the copy went to, the current one of the values'
                # device: not the current device's, which differs for a model on
                # "cuda:1" trained without torch.cuda.set_device (the event would
                # then not wait for the copy).
                event.record(torch.cuda.current_stream(dev))
                host.append((pinned, event))
            else:
                host.append(flat.detach().cpu().numpy())
        host.append(np.asarray(self.c_vals, dtype=np.float64))
        rows.append(np.asarray(self.c_rows, dtype=np.int64))
        keys.append(np.asarray(self.c_keys, dtype=np.int64))
        for r, k, v in self.c_arrays:
            host.append(v)
            rows.append(r)
            keys.append(k)
        return host, np.concatenate(rows), np.concatenate(keys)


#: At most this many 0-d CPU values are stacked through numpy (a value's
#: ``item()``: about half a microsecond), not ``torch.stack`` (whose code,
#: run once a step, has gone cold since the last: tens of microseconds).
FEW = 16

_NUMPY_OF = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16, torch.int64: np.int64,
             torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8, torch.uint8: np.uint8,
             torch.bool: np.bool_}


def _few_on_host(values: list) -> torch.Tensor | None:
    """A few 0-d CPU tensors of one dtype stacked into a new 1-d tensor
    through numpy; None for any other (a device, a subclass, bfloat16)."""
    dtype = _NUMPY_OF.get(values[0].dtype)
    if dtype is None or not all(type(t) is torch.Tensor and t.is_cpu for t in values):
        return None
    return torch.from_numpy(np.array([t.item() for t in values], dtype=dtype))


def _host_float64(runs: list) -> np.ndarray | None:
    """The CPU ``runs`` (1-d tensors) in one float64 array, in order, through
    numpy: torch's cat and conversion, run once a step, pay for their code
    gone cold since the last one. None where numpy does not read one of
    them: torch's ops then."""
    if not all(t.dtype in _NUMPY_OF for t in runs):
        return None
    try:
        arrays = [t.detach().numpy() for t in runs]
    except (RuntimeError, TypeError):  # (a tensor numpy cannot view: a conjugate, a subclass)
        return None
    return np.concatenate(arrays, dtype=np.float64) if len(arrays) > 1 else arrays[0].astype(np.float64)


#: 0-d values kept as they are before they are stacked into a run: a full
#: step of a large model makes thousands, and kept to the step's end they
#: lived long enough to be promoted to Python's oldest GC generation, waking
#: a full collection every few full steps; stacked every CHUNK, they die
#: young. (The values keep their order within each dtype.)
CHUNK = 256


def _stack_scalars(d: tuple) -> None:
    """The 0-d values of one device's slot (``d[0:3]``) stacked into runs
    (``d[3:6]``), one per dtype."""
    sts, srs, sks, rts, rrs, rks = d
    dtypes = [t.dtype for t in sts]
    kinds = dict.fromkeys(dtypes)  # (in order: the same layout at every run)
    if len(kinds) == 1:
        groups = [(sts, srs, sks)]
    else:  # e.g. float32 statistics and int32 counts
        groups = []
        for dt in kinds:
            idx = [i for i, d in enumerate(dtypes) if d == dt]
            groups.append(([sts[i] for i in idx], [srs[i] for i in idx], [sks[i] for i in idx]))
    for ts, rs, ks in groups:
        run = _few_on_host(ts) if len(ts) <= FEW else None
        rts.append(run if run is not None else torch.stack(ts))
        rrs.append(np.asarray(rs, dtype=np.int64))
        rks.append(np.asarray(ks, dtype=np.int64))
    sts.clear()
    srs.clear()
    sks.clear()


def all_finite(collectors: Sequence[Collector], tensors: Sequence[torch.Tensor] = ()) -> bool:
    """True when every floating-point device value of ``collectors`` (their
    0-d values and runs), every value they got through
    :meth:`Collector.measured`, and ``tensors`` are finite: one stack and one
    ``isfinite().all()`` per device and dtype, and one host read per device,
    which on CUDA waits for the device (the one planned synchronisation of a
    step). (Reading the thousands of 0-d values of a large model one by one
    costs milliseconds even on the CPU.)"""
    by_dev: dict[torch.device, dict[torch.dtype, tuple[list, list]]] = {}

    def put(t: torch.Tensor, scalar: bool) -> bool:
        """False when ``t`` is known now to hold a non-finite value."""
        if not t.is_floating_point():
            return True
        ss, rr = by_dev.setdefault(t.device, {}).setdefault(t.dtype, ([], []))
        (ss if scalar else rr).append(t)
        return True

    if any(c.c_nonfinite for c in collectors):
        return False
    for c in collectors:
        for sts, _, _, rts, _, _ in c.by_device.values():
            if not (all(put(t, True) for t in sts) and all(put(t, False) for t in rts)):
                return False
    if not all(put(t, t.dim() == 0) for t in tensors):
        return False
    for groups in by_dev.values():
        flags = []
        for ss, rr in groups.values():
            parts = ([torch.stack(ss)] if ss else []) + [r.reshape(-1) for r in rr]
            v = torch.cat(parts) if len(parts) > 1 else parts[0]
            flags.append(torch.isfinite(v).all())
        if not bool(torch.stack(flags).all() if len(flags) > 1 else flags[0]):
            return False
    return True


def host_finite(host: list) -> bool | None:
    """Whether the host copies of a step (:meth:`Collector.finish`) are all
    finite; None while a device copy may still be in flight (CUDA)."""
    for h in host:
        if isinstance(h, tuple):
            return None
    return all(np.isfinite(h).all() for h in host)
