"""One step's row on the host: :func:`slots.assemble`, plus what a clean cheap step implies.

On a cheap step of ``watch(nonfinite="replay")`` the hooks measure no module:
the modules that ran (:attr:`StepPacket.ran`) are those a forward hook noted,
or, with the module hooks off for the step (``Instrument._sync_module_hooks``),
those of the last step that had them on, less those whose trainable
parameters got no gradient (they may not have run).
When that step's every-step evidence is finite (every gradient norm, the
loss, the batch), no non-finite value reached the loss or any parameter's
gradient, so each module that ran gets ``act_nonfinite``, ``in_nonfinite``
and ``gout_nonfinite`` 0, where the column applies to it: where the last
step whose hooks measured the module (a full step, a replayed one) has a
value there (a module with integer inputs has no ``in_nonfinite``, a first
module before any parameter no ``gout_nonfinite``). When the evidence is not
finite and the step was not replayed (it could not be), those columns stay
NaN: not known. A value the rule cannot see: a NaN that reaches neither the
loss nor a parameter (only the batch's own gradient), which cannot
change training. (A clean full step's output-gradient flags are implied
the same way, in :func:`slots.assemble`.)

The decision uses the row's own values only, so it is the same for every
run of the same data, however far the worker lags behind training.
"""

from __future__ import annotations

import numpy as np

from ...format import metadata
from . import slots
from .slots import StepPacket

__all__ = ["RowAssembler", "histograms"]

_M = metadata.METRIC_INDEX
_FLAGS = np.array([_M["act_nonfinite"], _M["in_nonfinite"], _M["gout_nonfinite"]])


#: Slot layouts kept (:class:`slots.SlotLayout`): a run's steps come in a
#: few kinds (cheap, full statistics, histograms, replayed), each with its
#: own layout, the same from one step of its kind to the next.
LAYOUTS = 8
#: At most this many table places (``Key.COUNT`` x rows, float64) of steps
#: assembled in one call: past the caches' size, the calls that assembling
#: together saves cost less than the misses of its larger arrays
#: (``benchmarks/overhead.py --models big`` against ``tiny``).
TOGETHER = 32768


class RowAssembler:
    """The rows of one run, in step order (it remembers which columns apply
    to which module, and the recent steps' slot layouts)."""

    def __init__(self):
        self.applies = np.zeros((0, len(_FLAGS)), dtype=bool)
        self.layouts: dict[tuple, slots.SlotLayout] = {}

    def layout(self, packet: StepPacket, num_rows: int) -> slots.SlotLayout:
        """The slot layout of ``packet``: a kept one when a recent step had
        the same rows and keys (compared whole), else a new one."""
        rows = np.asarray(packet.rows, dtype=np.int64)
        keys = np.asarray(packet.keys, dtype=np.int64)
        key = (num_rows, rows.tobytes(), keys.tobytes())
        layout = self.layouts.get(key)
        if layout is None:
            if len(self.layouts) >= LAYOUTS:
                self.layouts.clear()  # (a run whose layout keeps changing: no gain to keep)
            layout = self.layouts[key] = slots.SlotLayout(rows, keys, num_rows)
        return layout

    def burst(self, packets: list, num_rows: int) -> list:
        """(host values, assembled row) of each packet of a burst, the layer
        list having ``num_rows`` rows before it: the row count a packet gets
        is the list's length once it has grown to that packet's."""
        values = [p.host_values() for p in packets]
        counts = []
        for p in packets:
            num_rows = max(num_rows, len(p.layers))
            counts.append(num_rows)
        return list(zip(values, self.assembled(packets, values, counts)))

    def assembled(self, packets: list, values: list, num_rows: list) -> list:
        """:func:`slots.assemble` of each packet (with its host values and
        row count), the packets of one layout in one
        :func:`slots.assemble_steps` call (a burst's cheap steps: one call
        for all of them; a step's row depends on its own values only). Only
        computes: :meth:`row` then finishes each row, in step order."""
        groups: dict[slots.SlotLayout, list] = {}  # (a kept layout is one object: keyed by identity)
        for i, (p, n) in enumerate(zip(packets, num_rows)):
            groups.setdefault(self.layout(p, n), []).append(i)
        out: list = [None] * len(packets)
        for layout, idx in groups.items():
            per_call = max(1, TOGETHER // (slots.Key.COUNT * max(1, layout.num_rows)))
            for k in range(0, len(idx), per_call):
                part = idx[k: k + per_call]
                for i, row in zip(part, slots.assemble_steps(np.stack([values[i] for i in part]), layout)):
                    out[i] = row
        return out

    def row(self, packet: StepPacket, values: np.ndarray, num_rows: int,
            assembled: np.ndarray | None = None) -> np.ndarray:
        """The float32 ``[num_rows, len(METRICS)]`` row of ``packet`` (whose
        host values are ``values``; ``assembled``: its row from
        :meth:`assembled`, when the caller has it)."""
        if assembled is not None:
            row = assembled
        else:
            row = slots.assemble(values, packet.rows, packet.keys, num_rows, self.layout(packet, num_rows))
        if len(self.applies) < num_rows:
            grown = np.zeros((num_rows, len(_FLAGS)), dtype=bool)
            grown[: len(self.applies)] = self.applies
            self.applies = grown
        ran = packet.ran
        if ran is None:
            # Measured: remember where the columns apply, for modules seen now.
            known = ~np.isnan(row[:, _FLAGS])
            seen = known.any(axis=1)
            self.applies[seen] = known[seen]
        elif len(ran) and not (row[:, slots.NONFINITE_EVIDENCE] > 0).any():  # NaN > 0 is False
            ran = ran[ran < num_rows]
            row[ran[:, None], _FLAGS] = np.where(self.applies[ran], np.float32(0.0), np.float32(np.nan))
        return row


def histograms(packet: StepPacket, values: np.ndarray, layers: list) -> list:
    """(tag, histogram parts) of each activation histogram in a step's values."""
    m = packet.keys == slots.Key.HIST
    if not m.any():
        return []
    width = slots.HIST_BINS + 5
    hv, hr = values[m], packet.rows[m]
    out = []
    for i in range(0, len(hv), width):
        parts = slots.histogram_parts(hv[i : i + width])
        if parts.get("num"):
            out.append((metadata.hist_tag(layers[int(hr[i])]["name"]), parts))
    return out
