"""Read neuraldbg data through TensorBoard's data provider.

Everything the plugin serves comes from ``context.data_provider`` (never from
the logdir directly), so it works with the Rust data server, the Python
loader and any other provider. Per-step tensors come back as one small array
per step; they are stacked into dense ``[S, L]`` matrices (rows padded when
the layer list grew) and kept in a small LRU cache keyed by
``(experiment, run, tag)`` and checked against ``(max_step, max_wall_time)``
from ``list_tensors``: repeated zooms never re-read, and a run that gains
steps is re-read once (its stale entry is replaced, not kept beside it).

With the Rust data server (``--load_fast``, a GrpcDataProvider) the same
ReadTensors request is sent on the provider's own gRPC stub, one matrix per
request and two in flight, and each answer is decoded in bulk (the raw
``tensor_content`` of all steps joined and viewed as one array) instead of
one ``make_ndarray`` per step; a failed request falls back to the public
``read_tensors``. For 1,000 layers x 20,000 steps this halves a cold read.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
from typing import Any, Sequence

import numpy as np
from tensorboard.data import provider
from tensorboard.util import tensor_util

try:  # the Rust data server's provider (load_fast); absent in odd installs
    import grpc
    from tensorboard.data import grpc_provider
    from tensorboard.data.proto import data_provider_pb2
except ImportError:  # pragma: no cover
    grpc = grpc_provider = data_provider_pb2 = None

from ..format import metadata

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
# ReadTensors requests sent to the Rust data server at once (each answer of
# a 1,000 x 20,000 matrix is ~80 MB in memory while it is decoded).
_IN_FLIGHT = 2


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


class _Point:
    __slots__ = ("step", "wall_time", "numpy")

    def __init__(self, step, wall_time, value):
        self.step, self.wall_time, self.numpy = step, wall_time, value


def _proto_points(data) -> list:
    """A TensorData proto (steps, wall times, TensorProtos) as points, one
    TensorProto decoded at a time (what GrpcDataProvider.read_tensors does)."""
    return [_Point(int(st), wt, tensor_util.make_ndarray(v))
            for st, wt, v in zip(data.step, data.wall_time, data.value)]


def _dense_proto(data, fill, dtype) -> Series:
    """``_dense`` of a TensorData proto, decoding all steps at once.

    When every step is a 1-D numeric tensor of one dtype and one length held
    in ``tensor_content`` (what the writer produces), the raw bytes of all
    steps are joined into one buffer and viewed as an [S, L] matrix: one
    np.frombuffer instead of 20,000 make_ndarray calls and a np.stack. Any
    other shape of data goes through the per-step path (padding, dropping).
    """
    values = data.value
    n = len(values)
    if n == 0:
        return _dense([], fill, dtype)
    first = values[0]
    try:
        a0 = tensor_util.make_ndarray(first)
    except Exception:  # an unknown dtype: let the slow path log and drop it
        a0 = None
    content = first.tensor_content
    if (a0 is None or a0.ndim != 1 or a0.dtype.kind not in "biuf" or not content
            or len(content) != a0.nbytes):
        return _dense(_proto_points(data), fill, dtype)
    nbytes, pb_dtype = len(content), first.dtype
    contents = []
    for v in values:
        c = v.tensor_content
        if len(c) != nbytes or v.dtype != pb_dtype or len(v.tensor_shape.dim) != 1:
            return _dense(_proto_points(data), fill, dtype)
        contents.append(c)
    # A bytearray so that the matrix is writable like np.stack's would be.
    buf = bytearray().join(contents)
    del contents
    matrix = np.frombuffer(buf, dtype=a0.dtype).reshape(n, a0.shape[0])
    matrix = matrix.astype(dtype, copy=False)
    steps = np.fromiter(data.step, dtype=np.int64, count=n)
    if n > 1 and not bool(np.all(steps[1:] > steps[:-1])):
        # Sort by step; for a repeated step the last one read wins.
        order = np.argsort(steps, kind="stable")
        ordered = steps[order]
        last = np.ones(n, dtype=bool)
        last[:-1] = ordered[1:] != ordered[:-1]
        keep = order[last]
        steps, matrix = steps[keep], matrix[keep]
    return Series(steps, matrix, matrix.nbytes + 8 * steps.shape[0])


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
        stub = self._grpc_stub() if missing else None
        if stub is not None:
            # One matrix per request (a 160 MB answer takes longer than two
            # 80 MB ones), JSON tags together, two requests in flight.
            groups = [[m for m in missing if m[0] in _JSON_TAGS]]
            groups += [[m] for m in missing if m[0] not in _JSON_TAGS]
            groups = [g for g in groups if g]
            done = set()
            try:
                for group, got in self._grpc_reads(stub, experiment_id, run, groups):
                    self._store(group, got, out, keep)
                    done.update(tag for tag, _ in group)
            except grpc.RpcError as e:
                logger.info("neuraldbg: direct ReadTensors failed (%s); using read_tensors", e)
            missing = [m for m in missing if m[0] not in done]
        while missing:
            group, missing = self._next_group(missing, out)
            got = self._provider.read_tensors(
                ctx,
                experiment_id=experiment_id,
                plugin_name=metadata.PLUGIN_NAME,
                downsample=self._downsample,
                run_tag_filter=provider.RunTagFilter(runs=[run], tags=[t for t, _ in group]),
            ).get(run, {})
            self._store(group, got, out, keep)
        return out

    def _store(self, group: list, got: dict, out: dict, keep: bool) -> None:
        """Build the Series of each (tag, cache key) of ``group`` from
        ``got`` ({tag: list of points, or a TensorData proto}) into ``out``."""
        for tag, key in group:
            raw = got.pop(tag, [])
            if tag in _JSON_TAGS:
                if not isinstance(raw, list):
                    raw = _proto_points(raw)
                series = _json_series(raw)
            else:
                fill, dtype = ((metadata.STATE_UNKNOWN, np.uint8)
                               if tag == metadata.TAG_STATES else (np.nan, np.float32))
                dense = _dense if isinstance(raw, list) else _dense_proto
                series = dense(raw, fill, dtype)
            del raw
            if keep:
                self._cache.put(*key, series)
            out[tag] = series

    def _grpc_reads(self, stub, experiment_id: str, run: str, groups: list):
        """Yield (group, {tag: TensorData proto}) for each group of
        (tag, key), sending the ReadTensors request of the data server (what
        GrpcDataProvider.read_tensors sends) on its stub.

        GrpcDataProvider.read_tensors decodes each step's TensorProto on its
        own (make_ndarray: ~13 us a step); here the answer is decoded in
        bulk by ``_dense_proto``. Requests are sent as gRPC futures (gRPC's
        own I/O threads; none started here), at most _IN_FLIGHT at once, so
        the next answer is transferred while this one is decoded. A failed
        request raises grpc.RpcError after the others are cancelled.
        """
        pending: collections.deque = collections.deque()
        todo = collections.deque(groups)
        try:
            while todo or pending:
                while todo and len(pending) < _IN_FLIGHT:
                    group = todo.popleft()
                    req = data_provider_pb2.ReadTensorsRequest()
                    req.experiment_id = experiment_id
                    req.plugin_filter.plugin_name = metadata.PLUGIN_NAME
                    req.run_tag_filter.runs.names.append(run)
                    req.run_tag_filter.tags.names.extend(tag for tag, _ in group)
                    req.downsample.num_points = self._downsample
                    pending.append((group, stub.ReadTensors.future(req)))
                group, fut = pending.popleft()
                res = fut.result()
                got = {}
                for run_entry in res.runs:
                    if run_entry.run_name == run:
                        for tag_entry in run_entry.tags:
                            got[tag_entry.tag_name] = tag_entry.data
                del res, fut
                yield group, got
        finally:
            for _, fut in pending:
                fut.cancel()

    def _grpc_stub(self):
        """The stub of a GrpcDataProvider (the Rust data server), else None."""
        if grpc_provider is None or not isinstance(self._provider,
                                                   grpc_provider.GrpcDataProvider):
            return None
        stub = getattr(self._provider, "_stub", None)
        return stub if hasattr(getattr(stub, "ReadTensors", None), "future") else None

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
            layers.append({"name": metadata.unnamed_row(i), "type": ""})
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
