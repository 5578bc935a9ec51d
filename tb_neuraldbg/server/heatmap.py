"""The rows a heatmap bins: a run's block summaries where they stand for its
rows, else its rows.

A full-range heatmap of a long run bins thousands of rows per column. The
writer's block summaries (``format/blocks.py``: each ``BLOCK_ROWS`` written
rows binned by the heatmap's own rule) give the same cells from one record
in ``BLOCK_ROWS``, so the data provider sends an eighth of the bytes. They
are used when ``blocks.covering`` says they stand for every stored row, the
range asked for cuts no block, and there are at least as many blocks in it
as columns (no column then spans fewer rows than one block); otherwise the
rows are binned as before. Either way the binning is ``format/binning.py``'s
and the answer says which (``"binned": "blocks" | "steps"``).
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import numpy as np

from ..format import binning, blocks, metadata, summary

__all__ = ["STATE_METRIC", "Blocks", "block_tags", "block_series", "blocks_in"]

logger = logging.getLogger(__name__)

STATE_METRIC = binning.STATE_METRIC
# The rule's names where they lived before format/binning.py.
MAX_RULE_METRICS, Heatmap = binning.MAX_RULE_METRICS, binning.Heatmap
bin_bounds, bin_heatmap = binning.bin_bounds, binning.bin_heatmap


class Blocks(NamedTuple):
    """A run's block summaries: ``first``, ``last``, ``rows`` int64 [B] (each
    block's first and last step and its rows; ``last`` is also the step it
    is stored at) and the Series read, by tag (the span's aside)."""

    first: np.ndarray
    last: np.ndarray
    rows: np.ndarray
    series: dict


def block_tags(metric: str | None) -> list:
    """The tags a block view of ``metric`` reads (None: the span and states)."""
    tags = [metadata.TAG_BLOCK_SPAN, metadata.TAG_BLOCK_STATES, metadata.TAG_CONFIG,
            metadata.TAG_LAYERS]
    if metric is not None and metric != STATE_METRIC:
        tags.append(metadata.block_stats_tag(metric))
    return tags


def block_series(data, ctx, eid: str, run: str, listing: dict, metric: str | None = None):
    """``Blocks`` of ``run`` (with ``metric``'s summaries, if given) when its
    block summaries stand for every row stored under the row tags listed,
    else None. Reads only block tags and JSON tags (cached as any read)."""
    tags = block_tags(metric)
    if any(t not in listing for t in tags if t != metadata.TAG_LAYERS):
        return None
    last_steps = [listing[t].max_step for t in summary.ROW_TAGS if t in listing]
    series = data.read(ctx, eid, run, tags, listing)
    span = series.get(metadata.TAG_BLOCK_SPAN)
    configs = series[metadata.TAG_CONFIG].records() if metadata.TAG_CONFIG in series else []
    if span is None:
        return None
    why = blocks.covering(span.data, span.steps, [c for _, c in configs], last_steps)
    if not why:
        # Every block tag holds the same blocks (one event each).
        stored = [series.get(t) for t in tags
                  if t not in (metadata.TAG_BLOCK_SPAN, metadata.TAG_CONFIG, metadata.TAG_LAYERS)]
        if any(s is None or not np.array_equal(s.steps, span.steps) for s in stored):
            why = "block records missing"
    if why:
        logger.debug("neuraldbg: run %r: rows binned, not blocks: %s", run[:200], why)
        return None
    rest = {t: v for t, v in series.items() if t != metadata.TAG_BLOCK_SPAN}
    return Blocks(span.data[:, 1].copy(), span.data[:, 2].copy(), span.data[:, 3].copy(), rest)


def blocks_in(b: Blocks, start: int, end: int) -> slice | None:
    """The blocks that make up the logged steps in [start, end], or None
    when a block has steps on both sides of either bound."""
    lo = int(np.searchsorted(b.first, start, side="left"))
    hi = int(np.searchsorted(b.last, end, side="right"))
    if lo > 0 and b.last[lo - 1] >= start:
        return None  # the block before holds steps from start on
    if hi < b.first.shape[0] and b.first[hi] <= end:
        return None  # the block after holds steps up to end
    return slice(lo, max(lo, hi))
