"""Block summaries: a run's rows binned a block at a time by the writer.

A long run's full-range heatmap bins every written row; reading 20,000 rows
of 1,000 layers through TensorBoard's data provider is most of a second per
metric, before any binning. The writer therefore also writes, for every
``metadata.BLOCK_ROWS`` consecutive rows it writes, one *block summary* per
tag: the block's rows binned into one column by the heatmap's own rule
(``binning.summarize``). The rule picks each cell's step by a total order,
so a bin of whole blocks binned from their summaries is what it is binned
from their rows: the plugin reads one record in ``BLOCK_ROWS`` instead of
every row, and gets the same cells (docs/FORMAT.md, *Block summaries*).

``BlockBuilder`` is the writer's side (pure numpy: the synthetic test
writer uses it too); ``covering`` is the reader's: whether the blocks stored
for a run stand for every row stored, so that they may be used instead.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from . import binning, metadata

__all__ = ["Block", "BlockBuilder", "covering"]


@dataclasses.dataclass(frozen=True)
class Block:
    """One block summary: ``span`` int64 [5] (step of the row written before
    it or -1, first step, last step, rows, 1 for the writer's last block
    else 0), ``values`` float32 [L, metrics], ``states`` uint8 [L]. Stored at
    step ``span[2]``."""

    span: np.ndarray
    values: np.ndarray
    states: np.ndarray

    @property
    def step(self) -> int:
        """The step it is stored at: its last row's."""
        return int(self.span[2])


class BlockBuilder:
    """Gathers the rows a writer writes, in order, into block summaries.

    ``add`` each written row (after it was written); it returns the
    finished block once ``rows`` rows are gathered. ``close`` returns the
    block of the rows gathered so far (or None): the writer closes the block
    before it flushes its file, so that what is on disk after its own
    flushes is covered by blocks; ``close(final=True)`` at the writer's end
    marks its last block final (written again at its step when it was
    already written: a reader keeps the last record of a step). A block
    whose summary was not written still counts as written here (its
    successor names its last step as the one before it), so a reader sees
    the gap.
    """

    def __init__(self, rows: int = metadata.BLOCK_ROWS):
        if rows < 1:
            raise ValueError(f"a block holds at least one row, got {rows}")
        self.rows = int(rows)
        self._steps: list[int] = []
        self._values: list[np.ndarray] = []
        self._states: list[np.ndarray] = []
        self._prev = -1
        self._last: Block | None = None

    @property
    def pending(self) -> int:
        """Rows added since the last block."""
        return len(self._steps)

    def add(self, step: int, row: np.ndarray, states: np.ndarray) -> Block | None:
        """Add a written row (float [L, metrics]) and its states (uint8 [L]);
        the block it completes, if any."""
        self._steps.append(int(step))
        self._values.append(row)
        self._states.append(states)
        return self.close() if len(self._steps) >= self.rows else None

    def close(self, final: bool = False) -> Block | None:
        """The block of the rows added since the last one (None if none);
        with ``final``, that block, else the last one again, marked final."""
        if not self._steps:
            if not final or self._last is None:
                return None
            span = self._last.span.copy()
            span[4] = 1
            self._last = dataclasses.replace(self._last, span=span)
            return self._last
        steps, values, states = self._steps, self._values, self._states
        self._steps, self._values, self._states = [], [], []
        span = np.array([self._prev, steps[0], steps[-1], len(steps), int(final)], dtype=np.int64)
        self._prev = steps[-1]
        self._last = None
        width = max(v.shape[0] for v in values)
        if all(v.shape[0] == width for v in values):
            rows = np.stack(values).astype(np.float32, copy=False)
            codes = np.stack(states).astype(np.uint8, copy=False)
        else:  # the layer list grew inside the block: pad as a reader does
            rows = np.full((len(values), width, len(metadata.METRICS)), np.nan, np.float32)
            codes = np.full((len(values), width), metadata.STATE_UNKNOWN, np.uint8)
            for i, (v, s) in enumerate(zip(values, states)):
                rows[i, : v.shape[0]] = v
                codes[i, : s.shape[0]] = s
        summary, worst = binning.summarize(rows, codes)
        self._last = Block(span, summary, worst)
        return self._last


def covering(spans: np.ndarray, keys: np.ndarray, configs: Sequence, last_steps: Sequence[int]) -> str:
    """Why the block summaries of a run do not stand for all its rows ("" when
    they do).

    ``spans`` int64 [B, 5] and ``keys`` [B] are the stored span records and
    their steps; ``configs`` the run's config records (one per writer, in
    the order written); ``last_steps`` the last stored step of each row tag
    to be replaced. The blocks stand for the rows when every writer of the
    run said it writes blocks, each writer's blocks follow each other with
    nothing between them (each names the previous one's last step as the
    row before it; a writer's first names none), a writer's blocks start
    after the previous writer's final block (one that closed: a writer
    stopped without ``close()`` may have rows after its last block), and
    the last block ends at the last stored row. A run resumed from an
    earlier step (blocks overlap), a lost record or a downsampled series
    fail one of these.
    """
    configs = list(configs)
    if not configs or any(not isinstance(c, dict) or c.get("blocks") != metadata.BLOCK_ROWS
                          for c in configs):
        return "a writer that did not write blocks of this size"
    spans = np.asarray(spans)
    if spans.ndim != 2 or spans.shape[0] == 0 or spans.shape[1] < 5:
        return "no blocks"
    prev, first, last, rows, final = (spans[:, i] for i in range(5))
    if not np.array_equal(np.asarray(keys), last):
        return "blocks not stored at their last step"
    starts = prev == -1
    if int(starts.sum()) != len(configs):
        return f"{int(starts.sum())} writers' blocks for {len(configs)} writers"
    follows = prev[1:] == last[:-1]
    if not starts[0] or not bool(np.all(np.where(starts[1:], final[:-1] == 1, follows))):
        return "blocks missing"
    if bool(np.any(final[:-1] & ~starts[1:])) or bool(np.any((final != 0) & (final != 1))):
        return "blocks after a writer's last"
    if (bool(np.any(first > last)) or bool(np.any(first[1:] <= last[:-1])) or bool(np.any(rows < 1))
            or bool(np.any(rows > last - first + 1))):  # (distinct steps)
        return "blocks out of order"
    if any(int(s) != int(last[-1]) for s in last_steps):
        return "rows after the last block"
    return ""
