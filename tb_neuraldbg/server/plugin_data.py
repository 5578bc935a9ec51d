"""Read neuraldbg data through TensorBoard's data provider.

Everything the plugin serves comes from ``context.data_provider`` (never from
the logdir directly), so it works with the Rust data server, the Python
loader and any other provider. Per-step tensors come back as one small array
per step; they are stacked into dense ``[S, L]`` matrices (rows padded when
the layer list grew) and kept in a small LRU cache keyed by
``(experiment, run, tag)`` and checked against ``(max_step, max_wall_time)``
from ``list_tensors``: repeated zooms never re-read, and a run that gains
steps is re-read once (its stale entry is replaced, not kept beside it).

A run resumed with ``purge_step`` reads as one run, as in the offline reader
(``format.sessions``): the records a resumed writer's purge step hides are
dropped before decoding, whichever provider kept them (TensorBoard's Python
loader keeps them when the first writer logged no session start).

Decoding is ``format.decode``'s, the offline reader's too: the same records
are skipped (each distinct note logged once, and kept per run for the
routes' ``warnings``), the same rows named, and a row is read only as wide
as the run's layer list makes believable (``decode.row_limit``), so a few KB
of [2^20]-shaped records never become [S, 2^20] matrices. A run with data
of a newer format version is refused (``listing``), its neighbours served.

With TensorBoard's Python loader (a MultiplexerDataProvider) the stored
TensorProtos are read from its multiplexer and decoded here:
``read_tensors`` would run ``make_ndarray`` on each, which raises on a
record it cannot decode (a 500 for the whole run) and broadcasts a single
value to whatever shape the record claims. Any other provider is read
through the public ``read_tensors``; a tag it cannot read is skipped with a
note, the other tags served.

With the Rust data server (``--load_fast``, a GrpcDataProvider) the same
ReadTensors request is sent on the provider's own gRPC stub, one matrix per
request and two in flight, and each answer is decoded in bulk (the raw
``tensor_content`` of all steps joined and viewed as one array) instead of
one ``make_ndarray`` per step; a failed request falls back to the public
``read_tensors``. For 1,000 layers x 20,000 steps this halves a cold read.
"""

from __future__ import annotations

import collections
import functools
import logging
import random
import threading
from typing import NamedTuple, Sequence

import numpy as np
from tensorboard import errors
from tensorboard.backend.event_processing import data_provider as tb_data_provider
from tensorboard.data import provider

try:  # the Rust data server's provider (load_fast); absent in odd installs
    import grpc
    from tensorboard.data import grpc_provider
    from tensorboard.data.proto import data_provider_pb2
except ImportError:  # pragma: no cover
    grpc = grpc_provider = data_provider_pb2 = None

from ..format import decode, metadata, sessions

__all__ = ["PluginData", "Series", "Listing", "DEFAULT_CACHE_BYTES", "FULL_DOWNSAMPLE"]

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
# Distinct notes about bad records remembered (so each is logged once).
_MAX_NOTES = 10_000
# Notes kept per run for the routes' "warnings", and runs that keep some.
_RUN_NOTES = 20
_NOTED_RUNS = 1000


class Series:
    """One tag of one run: ``steps`` int64 [S] and ``data``: for per-step
    tensors a dense [S, L] array (steps ascending and unique), for JSON tags
    a list of parsed JSON values (the step of each, in the order written,
    and ``walls`` their wall times); for a ``memo`` the derived value.
    ``nbytes`` is what the cache counts."""

    __slots__ = ("steps", "data", "nbytes", "walls")

    def __init__(self, steps: np.ndarray, data, nbytes: int, walls: np.ndarray | None = None):
        self.steps = steps
        self.data = data
        self.nbytes = nbytes
        self.walls = walls

    @classmethod
    def from_rows(cls, rows: decode.Rows) -> "Series":
        """The Series of a per-step tag decoded by ``decode.decode_rows``."""
        return cls(rows.steps, rows.values, rows.values.nbytes + 8 * rows.steps.shape[0])

    @classmethod
    def from_json(cls, records: decode.JsonRecords) -> "Series":
        """The Series of a JSON tag decoded by ``decode.decode_json``."""
        # Rough: parsed objects outweigh their text.
        return cls(records.steps, records.values,
                   4 * records.text_bytes + 16 * records.steps.shape[0], records.walls)

    def records(self) -> list:
        """(step, value) pairs of a JSON tag, as ``decode``'s run-level views take."""
        return list(zip(self.steps.tolist(), self.data))

    def json_records(self) -> decode.JsonRecords:
        """A JSON tag's records with their wall times, as ``format.sessions`` takes them."""
        return decode.JsonRecords(self.steps, self.data, 0, self.walls)


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


def _steps_and_tensors(raw) -> tuple:
    """(steps, wall times, tensors) of one tag of a provider's answer: a
    list of points (``step``, ``wall_time``, ``numpy``: read_tensors), a
    TensorData proto (the Rust data server's ReadTensors answer, TensorProtos
    decoded in bulk) or already (steps, wall times, TensorProtos) (the Python
    loader's multiplexer)."""
    if isinstance(raw, tuple):
        return raw
    if isinstance(raw, list):
        return [p.step for p in raw], [p.wall_time for p in raw], [p.numpy for p in raw]
    return raw.step, raw.wall_time, raw.value


def _purged(steps, walls, tensors, purges) -> tuple:
    """``steps, walls, tensors`` without the records the purges hide."""
    keep = sessions.kept(steps, walls, purges) if purges else None
    if keep is None:
        return steps, walls, tensors
    return tuple([v for v, k in zip(seq, keep) if k] for seq in (steps, walls, tensors))


class Listing(NamedTuple):
    """What ``list_tensors`` holds for the plugin: ``runs`` {run: {tag:
    TensorTimeSeries}} of the runs that can be read, ``refused`` {run:
    reason} of those written in a newer format version."""

    runs: dict
    refused: dict


@functools.lru_cache(maxsize=1024)
def _content_problem(content: bytes) -> tuple[bool, str]:
    """(newer, why) of a tag's plugin content that ``parse_plugin_metadata``
    refuses; (False, "") when it is fine. Cached: every request lists."""
    try:
        metadata.parse_plugin_metadata(content)
    except metadata.NewerFormatError as e:
        return True, str(e)
    except ValueError as e:
        return False, str(e)
    return False, ""


def _downsample(items: list, k: int) -> list:
    """At most ``k`` of ``items`` in order: the last always, the others a
    seeded uniform sample (what TensorBoard's data provider does, so both
    paths keep the same points)."""
    if k >= len(items):
        return items
    if k <= 0:
        return []
    keep = sorted(random.Random(0).sample(range(len(items) - 1), k - 1))
    return [items[i] for i in keep] + [items[-1]]


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
        self._noted: set = set()
        self._run_notes: collections.OrderedDict = collections.OrderedDict()
        self._notes_lock = threading.Lock()

    @property
    def cache_bytes(self) -> int:
        """Bytes held by the cache now."""
        return self._cache.nbytes

    def listing(self, ctx, experiment_id: str, run: str | None = None) -> Listing:
        """The neuraldbg tags of every run (or of ``run``), split into runs
        that can be read and runs refused (a tag of a newer format version;
        logged once). A tag whose metadata is unreadable but not newer is
        read as version 1, with a note."""
        rtf = provider.RunTagFilter(runs=[run]) if run is not None else None
        listed = self._provider.list_tensors(
            ctx,
            experiment_id=experiment_id,
            plugin_name=metadata.PLUGIN_NAME,
            run_tag_filter=rtf,
        )
        runs, refused = {}, {}
        for name, tags in listed.items():
            for tag, ts in tags.items():
                newer, why = _content_problem(bytes(ts.plugin_content or b""))
                if newer:
                    refused[name] = f"tag {tag!r}: {why}"
                    self.note(name)(f"{refused[name]}: run not read")
                    break
                if why:
                    self.note(name)(f"tag {tag!r}: {why}; read as format version "
                                    f"{metadata.FORMAT_VERSION}")
            else:
                runs[name] = tags
        return Listing(runs, refused)

    def list_series(self, ctx, experiment_id: str, run: str | None = None) -> dict:
        """{run: {tag: TensorTimeSeries}} of neuraldbg tags of the runs that
        can be read (one run or all); see ``listing``."""
        return self.listing(ctx, experiment_id, run).runs

    def runs(self, ctx, experiment_id: str) -> list[str]:
        """Names of runs that have neuraldbg data, sorted."""
        return sorted(self.list_series(ctx, experiment_id))

    def read(self, ctx, experiment_id: str, run: str, tags: Sequence[str],
             listing: dict | None = None, *, keep: bool = True) -> dict:
        """{tag: Series} for the tags of ``run`` that exist (cached reads).

        ``listing`` is this run's {tag: TensorTimeSeries} if already listed.
        With ``keep=False`` fresh reads are not added to the cache (for
        one-off wide reads that would evict the heatmap's matrices). Rows
        are read at most ``decode.row_limit`` of the layer list wide (the
        layer list is read first for that).
        """
        if listing is None:
            listing = self.list_series(ctx, experiment_id, run).get(run, {})
        tags = [t for t in dict.fromkeys(tags) if t in listing]
        out = {}
        width = None
        # The writers' starts first: a resumed one hides records of the others.
        start = self._read(ctx, experiment_id, run,
                           [t for t in (metadata.TAG_SESSION_START,) if t in listing], listing, keep,
                           None, ())
        purges = self._purges(start.get(metadata.TAG_SESSION_START), run)
        if metadata.TAG_SESSION_START in tags:
            out.update(start)
        if any(t not in decode.JSON_TAGS for t in tags):
            head = self._read(ctx, experiment_id, run,
                              [t for t in (metadata.TAG_LAYERS,) if t in listing], listing, keep,
                              None, purges)
            if metadata.TAG_LAYERS in tags:
                out.update(head)
            layers = head.get(metadata.TAG_LAYERS)
            # Quietly here: the routes name the layers (and note) themselves.
            width = decode.row_limit(len(decode.layer_list(layers.records() if layers else [])))
        rest = [t for t in tags if t not in out]
        out.update(self._read(ctx, experiment_id, run, rest, listing, keep, width, purges))
        return out

    def _purges(self, start: Series | None, run: str) -> tuple:
        """The purges of the run's writers' start records (``format.sessions``)."""
        if start is None:
            return ()
        return sessions.read_sessions(start.json_records(), None, self.note(run)).purges

    def _read(self, ctx, experiment_id: str, run: str, tags: list, listing: dict, keep: bool,
              width: int | None, purges: tuple) -> dict:
        """``read`` of tags in ``listing``, rows at most ``width`` wide,
        without what ``purges`` hide."""
        out, missing = {}, []
        for tag in tags:
            ts = listing[tag]
            key = (experiment_id, run, tag)
            version = (ts.max_step, ts.max_wall_time,
                       None if tag in decode.JSON_TAGS else width, purges)
            hit = self._cache.get(key, version)
            if hit is not None:
                out[tag] = hit
            else:
                missing.append((tag, (key, version)))
        if not missing:
            return out
        mux = self._multiplexer()
        if mux is not None:
            for tag, key in missing:
                try:
                    events = _downsample(mux.Tensors(run, tag), self._downsample)
                except KeyError:  # gone since it was listed
                    events = []
                got = {tag: ([e.step for e in events], [e.wall_time for e in events],
                             [e.tensor_proto for e in events])}
                self._store(run, [(tag, key)], got, out, keep, width, purges)
            return out
        stub = self._grpc_stub()
        if stub is not None:
            # One matrix per request (a 160 MB answer takes longer than two
            # 80 MB ones), JSON tags together, two requests in flight.
            groups = [[m for m in missing if m[0] in decode.JSON_TAGS]]
            groups += [[m] for m in missing if m[0] not in decode.JSON_TAGS]
            groups = [g for g in groups if g]
            done = set()
            try:
                for group, got in self._grpc_reads(stub, experiment_id, run, groups):
                    self._store(run, group, got, out, keep, width, purges)
                    done.update(tag for tag, _ in group)
            except grpc.RpcError as e:
                logger.info("neuraldbg: direct ReadTensors failed (%s); using read_tensors", e)
            missing = [m for m in missing if m[0] not in done]
        one_by_one = False
        while missing:
            if one_by_one:
                group, missing = missing[:1], missing[1:]
            else:
                group, missing = self._next_group(missing, out)
            try:
                got = self._provider.read_tensors(
                    ctx,
                    experiment_id=experiment_id,
                    plugin_name=metadata.PLUGIN_NAME,
                    downsample=self._downsample,
                    run_tag_filter=provider.RunTagFilter(runs=[run], tags=[t for t, _ in group]),
                ).get(run, {})
            except errors.PublicError:
                raise
            except Exception as e:  # the provider could not decode a record
                if len(group) > 1:  # find which tag: one at a time from here
                    one_by_one, missing = True, group + missing
                    continue
                self.note(run)(f"skipped tag {group[0][0]}: the data provider could not read "
                               f"it ({type(e).__name__}: {str(e)[:200]})")
                got = {}
            self._store(run, group, got, out, keep, width, purges)
        return out

    def _store(self, run: str, group: list, got: dict, out: dict, keep: bool,
               width: int | None, purges: tuple = ()) -> None:
        """Decode the Series of each (tag, cache key) of ``group`` from
        ``got`` ({tag: list of points, a TensorData proto, or (steps, wall
        times, TensorProtos)}) into ``out``; rows at most ``width`` wide,
        without the records ``purges`` hide."""
        note = self.note(run)
        for tag, key in group:
            steps, walls, tensors = _purged(*_steps_and_tensors(got.pop(tag, [])), purges)
            if tag in decode.JSON_TAGS:
                series = Series.from_json(decode.decode_json(steps, tensors, note, tag, walls))
            else:
                limit = decode.MAX_ROWS if width is None else width
                series = Series.from_rows(decode.decode_tag_rows(tag, steps, tensors, note, limit))
            del steps, walls, tensors
            if keep:
                self._cache.put(*key, series)
            out[tag] = series

    def note(self, run: str) -> decode.Note:
        """The decoder's note for ``run``: a warning log line, once per
        distinct message (a run's views are decoded again on every request),
        kept for ``warnings``."""

        def log(message: str) -> None:
            key = (run, message)
            with self._notes_lock:
                if key in self._noted:
                    return
                if len(self._noted) >= _MAX_NOTES:
                    self._noted.clear()
                self._noted.add(key)
                kept = self._run_notes.setdefault(run, [])
                self._run_notes.move_to_end(run)
                if len(kept) < _RUN_NOTES:
                    kept.append(message)
                while len(self._run_notes) > _NOTED_RUNS:
                    self._run_notes.popitem(last=False)
            logger.warning("neuraldbg: run %r: %s", run[:200], message)

        return log

    def memo(self, experiment_id: str, run: str, name: str, version, build,
             nbytes=lambda value: 4096):
        """A value derived from a run's tags (a report, a summary), built by
        ``build()`` once per ``version`` (the versions of the tags it reads)
        and kept in the cache beside the tags, counted as ``nbytes(value)``."""
        key = (experiment_id, run, f"<{name}>")  # no tag looks like this
        hit = self._cache.get(key, version)
        if hit is not None:
            return hit.data
        value = build()
        self._cache.put(key, version, Series(np.zeros(0, np.int64), value, nbytes(value)))
        return value

    def warnings(self, run: str) -> list[str]:
        """The first notes logged about ``run`` (at most 20): what of it
        could not be read, as far as it has been read."""
        with self._notes_lock:
            return list(self._run_notes.get(run, ()))

    def _multiplexer(self):
        """The multiplexer of TensorBoard's Python loader, else None."""
        if isinstance(self._provider, tb_data_provider.MultiplexerDataProvider):
            mux = getattr(self._provider, "_multiplexer", None)
            if hasattr(mux, "Tensors"):
                return mux
        return None

    def _grpc_reads(self, stub, experiment_id: str, run: str, groups: list):
        """Yield (group, {tag: TensorData proto}) for each group of
        (tag, key), sending the ReadTensors request of the data server (what
        GrpcDataProvider.read_tensors sends) on its stub.

        GrpcDataProvider.read_tensors decodes each step's TensorProto on its
        own (make_ndarray, a Python call a step); here the answer is decoded in
        bulk by ``decode.decode_rows``. Requests are sent as gRPC futures (gRPC's
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
        json_tags = [m for m in missing if m[0] in decode.JSON_TAGS]
        if json_tags:
            return json_tags, [m for m in missing if m[0] not in decode.JSON_TAGS]
        cells = max((s.data.size for s in known.values() if isinstance(s.data, np.ndarray)),
                    default=0)
        per_group = max(1, _MAX_READ_BYTES // (4 * cells)) if cells else 1
        return missing[:per_group], missing[per_group:]

    # -- run-level views -------------------------------------------------

    def layers(self, series: dict, width: int = 0, run: str = "") -> list[dict]:
        """The run's layer list (``decode.layer_list``: the newest, which only
        grows), rows without a name up to ``width`` named by row number."""
        records = self._records(series, metadata.TAG_LAYERS)
        return decode.layer_list(records, width, self.note(run))

    def events(self, series: dict, run: str = "") -> list[dict]:
        """Every event dict written for the run, in the order written."""
        return decode.run_events(self._records(series, metadata.TAG_EVENTS), self.note(run))

    def run_sessions(self, series: dict, run: str = "") -> sessions.Sessions:
        """The run's writer sessions (``format.sessions``): whether its last
        writer closed it (``complete``), the purges."""
        start, end = (series.get(t) for t in (metadata.TAG_SESSION_START, metadata.TAG_SESSION_END))
        if start is None:
            return sessions.NONE
        return sessions.read_sessions(start.json_records(), end.json_records() if end is not None else None,
                                      self.note(run))

    def diagnosis(self, series: dict, run: str = "") -> dict | None:
        """The run's diagnosis: the last one written, each writer's combined
        where the run was resumed (``format.sessions.combined_diagnosis``),
        or None."""
        diag = series.get(metadata.TAG_DIAGNOSIS)
        if diag is None:
            return None
        return sessions.combined_diagnosis(diag.json_records(), self.run_sessions(series, run), self.note(run))

    @staticmethod
    def _records(series: dict, tag: str) -> list:
        s = series.get(tag)
        return s.records() if s is not None else []
