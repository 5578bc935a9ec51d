"""Read neuraldbg data through TensorBoard's data provider.

Everything the plugin serves comes from ``context.data_provider`` (never from
the logdir directly), so it works with the Rust data server, the Python
loader and any other provider. Per-step tensors come back as one small array
per step; they are stacked into dense ``[S, L]`` matrices (rows padded when
the layer list grew) and kept in a small LRU cache keyed by
``(experiment, run, tag)`` and checked against ``(max_step, max_wall_time)``
from ``list_tensors``: repeated zooms never re-read, and a run that gains
steps is re-read once (its stale entry is replaced, not kept beside it).
"""

from __future__ import annotations

import collections
import json
import logging
import threading
from typing import Any, Sequence

import numpy as np
from tensorboard.data import provider

from . import metadata

__all__ = ["PluginData", "Series", "DEFAULT_CACHE_BYTES", "FULL_DOWNSAMPLE"]

logger = logging.getLogger(__name__)

# read_tensors(downsample=0) returns nothing, and a sampling hint of 0 means
# "keep everything": ask for more points than any run has.
FULL_DOWNSAMPLE = 1_000_000_000
# The cache holds dense matrices: a 1,000-layer x 20,000-step metric is 80 MB.
DEFAULT_CACHE_BYTES = 512 * 1024 * 1024
# Keep one read_tensors answer under the gRPC receive limit of the Rust data
# server client (256 MiB) with room for protobuf overhead.
_MAX_READ_BYTES = 160 * 1024 * 1024


class Series:
    """One tag of one run: ``steps`` int64 [S] ascending and unique, and
    ``data``: a dense [S, L] array for per-step tensors, or a list of parsed
    JSON values for JSON tags."""

    __slots__ = ("steps", "data", "nbytes")

    def __init__(self, steps: np.ndarray, data, nbytes: int):
        self.steps = steps
        self.data = data
        self.nbytes = nbytes


class _LRU:
    """Thread-safe LRU of Series bounded by total bytes.

    One entry per (experiment, run, tag), tagged with the series version
    (max_step, max_wall_time): a newer version replaces the stale one instead
    of sitting next to it. An entry larger than the budget is not kept.
    """

    def __init__(self, max_bytes: int):
        self._max = max_bytes
        self._bytes = 0
        self._items: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, version) -> Series | None:
        with self._lock:
            item = self._items.get(key)
            if item is None or item[0] != version:
                return None
            self._items.move_to_end(key)
            return item[1]

    def put(self, key, version, series: Series) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1].nbytes
            if series.nbytes > self._max:
                return
            self._items[key] = (version, series)
            self._bytes += series.nbytes
            while self._bytes > self._max:
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped.nbytes

    @property
    def nbytes(self) -> int:
        return self._bytes


def _dedupe_sorted(points: list) -> list:
    """Points sorted by step; for a repeated step the last one read wins
    (a run restarted from a checkpoint rewrites steps)."""
    by_step = {}
    for p in points:
        by_step[int(p.step)] = p
    return [by_step[s] for s in sorted(by_step)]


def _dense(points: list, fill, dtype) -> Series:
    """Stack 1-D per-step arrays into [S, L], padding short rows with fill.
    Points that are not 1-D arrays are dropped (with a log line)."""
    points = _dedupe_sorted(points)
    arrays, steps = [], []
    for p in points:
        a = np.asarray(p.numpy)
        if a.ndim != 1 or a.dtype.kind not in "biuf":
            logger.warning("neuraldbg: skipping a malformed tensor at step %d", p.step)
            continue
        arrays.append(a)
        steps.append(int(p.step))
    width = max((a.shape[0] for a in arrays), default=0)
    if arrays and all(a.shape[0] == width for a in arrays):
        data = np.stack(arrays).astype(dtype, copy=False)
    else:
        data = np.full((len(arrays), width), fill, dtype=dtype)
        for i, a in enumerate(arrays):
            data[i, : a.shape[0]] = a
    return Series(np.array(steps, dtype=np.int64), data, data.nbytes + 8 * len(steps))


def _json_series(points: list) -> Series:
    """Parse JSON string tensors, in step order; unreadable ones are dropped
    with a log line. Repeated steps are all kept: two event records written
    at one step (say, the events only decidable at the end of a run, after
    that step's own) both count."""
    points = sorted(points, key=lambda p: p.step)
    steps, values, nbytes = [], [], 0
    for p in points:
        try:
            raw = np.asarray(p.numpy).item()
            text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
            values.append(json.loads(text))
            steps.append(int(p.step))
            nbytes += len(text) * 4  # rough: parsed objects outweigh their text
        except (ValueError, TypeError) as e:
            logger.warning("neuraldbg: skipping unreadable JSON at step %d: %s", p.step, e)
    return Series(np.array(steps, dtype=np.int64), values, nbytes + 8 * len(steps))


_JSON_TAGS = frozenset(
    {metadata.TAG_LAYERS, metadata.TAG_EVENTS, metadata.TAG_DIAGNOSIS, metadata.TAG_CONFIG}
)


class PluginData:
    """neuraldbg data of one TensorBoard instance, read via its data provider.

    Methods take the request's ``ctx`` and ``experiment_id``; run names are
    provider run names. Nothing here raises HTTP errors: unknown runs give
    None or empty results and the plugin decides what that means.
    """

    def __init__(self, data_provider, *, downsample: int = FULL_DOWNSAMPLE,
                 cache_bytes: int = DEFAULT_CACHE_BYTES):
        self._provider = data_provider
        self._downsample = int(downsample) if downsample else FULL_DOWNSAMPLE
        self._cache = _LRU(cache_bytes)

    @property
    def cache_bytes(self) -> int:
        """Bytes held by the cache now."""
        return self._cache.nbytes

    def list_series(self, ctx, experiment_id: str, run: str | None = None) -> dict:
        """{run: {tag: TensorTimeSeries}} of neuraldbg tags (one run or all)."""
        rtf = provider.RunTagFilter(runs=[run]) if run is not None else None
        return self._provider.list_tensors(
            ctx,
            experiment_id=experiment_id,
            plugin_name=metadata.PLUGIN_NAME,
            run_tag_filter=rtf,
        )

    def runs(self, ctx, experiment_id: str) -> list[str]:
        """Names of runs that have neuraldbg data, sorted."""
        return sorted(self.list_series(ctx, experiment_id))

    def read(self, ctx, experiment_id: str, run: str, tags: Sequence[str],
             listing: dict | None = None, *, keep: bool = True) -> dict:
        """{tag: Series} for the tags of ``run`` that exist (cached reads).

        ``listing`` is this run's {tag: TensorTimeSeries} if already listed.
        With ``keep=False`` fresh reads are not added to the cache (for
        one-off wide reads that would evict the heatmap's matrices).
        """
        if listing is None:
            listing = self.list_series(ctx, experiment_id, run).get(run, {})
        out, missing = {}, []
        for tag in tags:
            ts = listing.get(tag)
            if ts is None:
                continue
            key = (experiment_id, run, tag)
            version = (ts.max_step, ts.max_wall_time)
            hit = self._cache.get(key, version)
            if hit is not None:
                out[tag] = hit
            else:
                missing.append((tag, (key, version)))
        while missing:
            group, missing = self._next_group(missing, out)
            got = self._provider.read_tensors(
                ctx,
                experiment_id=experiment_id,
                plugin_name=metadata.PLUGIN_NAME,
                downsample=self._downsample,
                run_tag_filter=provider.RunTagFilter(runs=[run], tags=[t for t, _ in group]),
            ).get(run, {})
            for tag, key in group:
                points = got.get(tag, [])
                if tag in _JSON_TAGS:
                    series = _json_series(points)
                elif tag == metadata.TAG_STATES:
                    series = _dense(points, metadata.STATE_UNKNOWN, np.uint8)
                else:
                    series = _dense(points, np.nan, np.float32)
                if keep:
                    self._cache.put(*key, series)
                out[tag] = series
        return out

    @staticmethod
    def _next_group(missing: list, known: dict) -> tuple[list, list]:
        """The next tags to read in one request, and the rest.

        JSON tags are small and go together. Per-step matrices can be large;
        their size is estimated from a matrix of this run already read (4
        bytes a cell), so that one answer stays under _MAX_READ_BYTES; with
        nothing known yet, one matrix is read alone first.
        """
        json_tags = [m for m in missing if m[0] in _JSON_TAGS]
        if json_tags:
            return json_tags, [m for m in missing if m[0] not in _JSON_TAGS]
        cells = max((s.data.size for s in known.values() if isinstance(s.data, np.ndarray)),
                    default=0)
        per_group = max(1, _MAX_READ_BYTES // (4 * cells)) if cells else 1
        return missing[:per_group], missing[per_group:]

    # -- run-level views -------------------------------------------------

    def layers(self, series: dict, width: int = 0) -> list[dict]:
        """The run's layer list (last written; it only grows), padded with
        placeholder names to ``width`` rows if the stats have more rows."""
        layers: list[dict] = []
        s = series.get(metadata.TAG_LAYERS)
        if s is not None:
            for value in reversed(s.data):
                if isinstance(value, dict) and isinstance(value.get("layers"), list):
                    layers = [
                        {"name": str(l.get("name", "")), "type": str(l.get("type", ""))}
                        for l in value["layers"]
                        if isinstance(l, dict)
                    ]
                    break
        for i in range(len(layers), width):
            layers.append({"name": f"#{i}", "type": ""})
        return layers

    @staticmethod
    def events(series: dict) -> list[dict]:
        """Every event dict written for the run, in the order written."""
        s = series.get(metadata.TAG_EVENTS)
        out = []
        if s is not None:
            for value in s.data:
                if isinstance(value, list):
                    out += [e for e in value if isinstance(e, dict)]
        return out

    @staticmethod
    def diagnosis(series: dict) -> Any:
        """The last diagnosis written for the run, or None."""
        s = series.get(metadata.TAG_DIAGNOSIS)
        return s.data[-1] if s is not None and s.data else None
