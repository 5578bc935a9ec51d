"""Stored neuraldbg tensors -> arrays and values: the one decoder of the format.

The offline reader (event files through TensorBoard's multiplexer) and the
plugin (a data provider, or the Rust data server's answers) both decode here,
so they read every record the same way and name a nameless row alike. No I/O
and no server code: numpy and TensorBoard's protos only.

A tensor is a ``TensorProto`` or an already decoded numpy array (what a data
provider returns). Everything stored is untrusted: a record that cannot be
read is skipped and described to ``note``, a callable taking one message (the
reader turns it into a ``NeuralDbgDataWarning``, the plugin into a log line);
a message about data that was not read starts with "skipped" (``is_skip``).
Nothing here raises for bad data, and nothing allocates by a stored shape:
a shape is bounded by ``MAX_ROWS``, a row is read only as wide as the layer
list makes believable (``row_limit``), and a value is never broadcast to a
shape (a proto holding one value for a [2^20] row is skipped, not expanded).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, NamedTuple

import numpy as np
from tensorboard.compat.proto import types_pb2
from tensorboard.compat.tensorflow_stub import dtypes as tf_dtypes
from tensorboard.util import tensor_util

from . import metadata

__all__ = [
    "MAX_ROWS",
    "MAX_NAME",
    "JSON_TAGS",
    "is_skip",
    "row_limit",
    "Note",
    "Rows",
    "JsonRecords",
    "row_format",
    "decode_rows",
    "decode_tag_rows",
    "decode_json",
    "layer_list",
    "run_events",
    "last_diagnosis",
    "run_config",
]

Note = Callable[[str], None]

# More rows than any model has layers: a longer stored row is corrupt data.
MAX_ROWS = 1 << 20

# Tags holding one JSON string scalar per record (the rest are per-step rows).
JSON_TAGS = frozenset(
    {metadata.TAG_LAYERS, metadata.TAG_EVENTS, metadata.TAG_DIAGNOSIS, metadata.TAG_CONFIG,
     metadata.TAG_SESSION_START, metadata.TAG_SESSION_END}
)

# The TensorFlow type each row dtype is stored as (docs/FORMAT.md).
_PB_DTYPE = {np.dtype(np.float32): types_pb2.DT_FLOAT, np.dtype(np.uint8): types_pb2.DT_UINT8,
             np.dtype(np.int64): types_pb2.DT_INT64}


def _ignore(message: str) -> None:
    """The default ``note``: bad records are skipped silently."""


def is_skip(message: str) -> bool:
    """Whether a note says that data was not read (rather than, e.g., how a
    row was named): such notes make a report incomplete."""
    return message.startswith("skipped")


class _Skips:
    """The skipped records of one tag, told in one note per reason (a file of
    100,000 broken records is one line, not 100,000), at most _MAX_REASONS
    reasons and a last line counting the rest."""

    def __init__(self, what: str):
        self.what = what
        self.reasons: dict = {}  # why -> [count, first step, last step]

    def add(self, step, why: str) -> None:
        got = self.reasons.get(why)
        if got is not None:
            got[0] += 1
            got[2] = step
        elif len(self.reasons) < _MAX_REASONS:
            self.reasons[why] = [1, step, step]
        else:
            self.reasons.setdefault(None, [0, step, step])[0] += 1

    def tell(self, note: Note) -> None:
        for why, (n, first, last) in self.reasons.items():
            if why is None:
                note(f"skipped {n} more {self.what} records for other reasons")
            elif n == 1:
                note(f"skipped a {self.what} record at step {first}: {why}")
            else:
                note(f"skipped {n} {self.what} records (steps {first} to {last}): {why}")


# Distinct reasons told per tag.
_MAX_REASONS = 10
# A longer layer name is not a module's qualified name (it would also be
# sent in every answer naming the layers): the row is named by its number.
MAX_NAME = 4096


def row_limit(named: int) -> int:
    """How many rows of a per-step tensor are believed when the layer list
    names ``named`` rows: a row beyond the list is plausible (a record of the
    list lost, a list still to come), a million of them is not. Rows past
    the limit are not read (the decoder says so once per tag)."""
    return min(MAX_ROWS, 4 * max(0, int(named)) + 256)


class Rows(NamedTuple):
    """A series of per-step rows: ``steps`` int64 [S] ascending and unique,
    ``values`` [S, L] (rows shorter than the longest padded with the fill),
    ``lengths`` int64 [S] (each step's own row count)."""

    steps: np.ndarray
    values: np.ndarray
    lengths: np.ndarray


class JsonRecords(NamedTuple):
    """The readable records of a JSON tag, in the order given (the order
    written, so after a restart the newest record comes last): ``steps``
    int64 [n], ``values`` the parsed JSON, ``text_bytes`` their total size;
    ``walls`` float64 [n], the records' wall times, when they were given."""

    steps: np.ndarray
    values: list
    text_bytes: int
    walls: np.ndarray | None = None

    def pairs(self) -> list:
        """(step, value) pairs, as the run-level views below take them."""
        return list(zip(self.steps.tolist(), self.values))


# ---------------------------------------------------------------------------
# Per-step rows


def row_format(tag: str) -> tuple[np.dtype, Any]:
    """(dtype, fill) of a per-step row tag: uint8 and STATE_UNKNOWN for the
    states (of steps or blocks), int64 and -1 for the block spans, float32
    and NaN (not measured) for the stats."""
    if tag in (metadata.TAG_STATES, metadata.TAG_BLOCK_STATES):
        return np.dtype(np.uint8), metadata.STATE_UNKNOWN
    if tag == metadata.TAG_BLOCK_SPAN:
        return np.dtype(np.int64), -1
    return np.dtype(np.float32), np.nan


class _Spec:
    """What a valid row of one dtype looks like."""

    __slots__ = ("dtype", "little", "pb_dtype", "itemsize", "kind", "bad")

    def __init__(self, dtype: np.dtype):
        if dtype not in _PB_DTYPE:
            raise ValueError(f"rows are float32, uint8 or int64, not {dtype}")
        self.dtype = dtype
        self.little = dtype.newbyteorder("<")  # TensorProto content is little-endian
        self.pb_dtype = _PB_DTYPE[dtype]
        self.itemsize = dtype.itemsize
        self.kind = dtype.kind
        self.bad = f"not a 1-D {dtype.name} tensor"


def _proto_row(proto, spec: _Spec, width: int):
    """(row, length, "") of a valid TensorProto, else (None, 0, why); the row
    is its raw little-endian ``tensor_content``, or an array of ``spec.dtype``
    for values stored in float_val / int_val, cut to ``width`` values."""
    if proto.dtype != spec.pb_dtype:
        try:  # named as numpy names it, as for an array
            name = tf_dtypes.as_dtype(proto.dtype).name
        except TypeError:
            name = f"#{proto.dtype}"
        return None, 0, f"dtype {name}"
    dims = proto.tensor_shape.dim
    if len(dims) != 1:
        return None, 0, f"{len(dims)} dimensions"
    n = dims[0].size
    if not 0 <= n <= MAX_ROWS:
        # make_ndarray would allocate whatever the (untrusted) shape says.
        return None, 0, f"{n} rows, beyond the limit of {MAX_ROWS}"
    content = proto.tensor_content
    if content:
        if len(content) != n * spec.itemsize:
            return None, 0, f"{len(content)} bytes of content for {n} values"
        if n > width:
            return content[: width * spec.itemsize], width, ""
        return content, n, ""
    # Values in float_val / int_val (other writers). TensorFlow would
    # broadcast a single value to the whole shape: a 5 KB file of [2^20]
    # rows would become gigabytes. Only a full row is read.
    stored = len(proto.float_val if spec.kind == "f" else
                 proto.int64_val if spec.itemsize == 8 else proto.int_val)
    if stored != n:
        return None, 0, f"{stored} values stored for {n} rows"
    try:
        arr = tensor_util.make_ndarray(proto)
    except (ValueError, TypeError) as e:
        return None, 0, str(e)[:200]
    if arr.shape != (n,):
        return None, 0, f"{arr.size} values for {n} rows"
    return arr[:width].astype(spec.dtype, copy=False), min(n, width), ""


def _array_row(arr: np.ndarray, spec: _Spec, width: int):
    """(row in ``spec.dtype``, length, "") of a valid numpy array cut to
    ``width`` values, else (None, 0, why)."""
    dt = arr.dtype
    if dt.kind != spec.kind or dt.itemsize != spec.itemsize:
        return None, 0, f"dtype {dt}"
    if arr.ndim != 1:
        return None, 0, f"{arr.ndim} dimensions"
    if arr.shape[0] > MAX_ROWS:
        return None, 0, f"{arr.shape[0]} rows, beyond the limit of {MAX_ROWS}"
    arr = arr[:width]
    return (arr if dt == spec.dtype else arr.astype(spec.dtype)), arr.shape[0], ""


def _last_per_step(steps: np.ndarray) -> np.ndarray | None:
    """Indices keeping the last record of each step (a rewrite wins), in
    step order; None when the steps already ascend strictly (the usual case)."""
    n = steps.shape[0]
    if n < 2 or bool(np.all(steps[1:] > steps[:-1])):
        return None
    order = np.argsort(steps, kind="stable")
    ordered = steps[order]
    last = np.ones(n, dtype=bool)
    last[:-1] = ordered[1:] != ordered[:-1]
    return order[last]


def decode_rows(steps: Iterable[int], tensors: Iterable, dtype, fill,
                note: Note | None = None, tag: str = "row",
                max_width: int = MAX_ROWS) -> Rows:
    """Decode a series of 1-D per-step tensors (TensorProtos or numpy arrays,
    ``steps[i]`` the step of ``tensors[i]``) into ``Rows``.

    Only 1-D tensors of ``dtype`` (float32, uint8, int64) with at most MAX_ROWS
    values are read; any other record is skipped with a note. Rows longer
    than ``max_width`` (``row_limit`` of the layer list) are cut to it, with
    one note for the tag. For a repeated step the last record wins. The rows
    are decoded in bulk: the raw bytes of all records are joined and viewed
    as one array (one np.frombuffer instead of one make_ndarray per step);
    the matrix is writable.
    """
    note = note or _ignore
    spec = _Spec(np.dtype(dtype))
    width = max(0, min(int(max_width), MAX_ROWS))
    kept, lengths = [], []
    chunks = _Gather(len(tensors) if hasattr(tensors, "__len__") else 0, spec)
    cut, skips = 0, _Skips(tag)
    for step, tensor in zip(steps, tensors):
        if isinstance(tensor, np.ndarray):
            chunk, length, why = _array_row(tensor, spec, width)
            longer = tensor.ndim == 1 and chunk is not None and tensor.shape[0] > width
        else:
            chunk, length, why = _proto_row(tensor, spec, width)
            longer = chunk is not None and tensor.tensor_shape.dim[0].size > width
        if chunk is None:
            skips.add(step, f"{spec.bad} ({why})")
            continue
        cut += longer
        kept.append(step)
        lengths.append(length)
        chunks.add(chunk)
        del chunk  # (its memory is the next record's)
    skips.tell(note)
    if cut:
        note(f"skipped the rows past {width} of {cut} {tag} records (the layer list makes "
             "no more believable)")
    return _assemble(np.asarray(kept, dtype=np.int64), np.asarray(lengths, dtype=np.int64),
                     chunks, spec, fill)


class _Gather:
    """The valid records' values, gathered as they are decoded, as one flat
    array at the end.

    The bulk path: while every record is raw content (bytes) of one length,
    each is copied at once into one buffer sized for all records, so its
    bytes object is freed and the next one reuses that memory; a list of
    20,000 rows and a join of them would first fault in as much memory
    again (a fresh process pays for every page it touches first: the
    plugin's first request). Any other record (another length, an array) turns the rows so
    far into views of the buffer, kept with the rest in a list."""

    __slots__ = ("capacity", "spec", "buf", "size", "count", "chunks")

    def __init__(self, capacity: int, spec: _Spec):
        self.capacity, self.spec = capacity, spec
        self.buf: bytearray | None = None
        self.size = self.count = 0  # bytes a row, rows in buf
        self.chunks: list | None = None if capacity else []

    def add(self, chunk) -> None:
        if self.chunks is None and type(chunk) is bytes:
            if self.buf is None and chunk:
                self.size = len(chunk)
                self.buf = bytearray(self.capacity * self.size)  # (zeroed pages, faulted as written)
            if self.size and len(chunk) == self.size and self.count < self.capacity:
                at = self.count * self.size
                self.buf[at:at + self.size] = chunk
                self.count += 1
                return
        if self.chunks is None:
            self.chunks = [self._view(i) for i in range(self.count)]
        self.chunks.append(chunk)

    def _view(self, i: int) -> np.ndarray:
        itemsize = self.spec.itemsize
        return np.frombuffer(self.buf, dtype=self.spec.little, count=self.size // itemsize,
                             offset=i * self.size)

    def flat(self) -> np.ndarray:
        """Every gathered value in order, one writable array."""
        little = self.spec.little
        if self.chunks is None:
            if self.buf is None:
                return np.zeros(0, dtype=little)
            return np.frombuffer(self.buf, dtype=little, count=self.count * self.size // self.spec.itemsize)
        chunks, self.chunks = self.chunks, []
        if all(type(c) is bytes for c in chunks):
            # One buffer of every record's raw content, viewed as one array
            # (a bytearray, so that the matrix is writable).
            return np.frombuffer(bytearray().join(chunks), dtype=little)
        return np.concatenate([np.frombuffer(c, dtype=little) if type(c) is bytes else c for c in chunks])


def _assemble(steps: np.ndarray, lengths: np.ndarray, chunks: _Gather, spec: _Spec, fill) -> Rows:
    """The Rows of valid records: one buffer, viewed, deduplicated, padded."""
    n = steps.shape[0]
    keep = _last_per_step(steps)
    if n == 0:
        return Rows(steps, np.full((0, 0), fill, dtype=spec.dtype), lengths)
    flat = chunks.flat()
    if bool(np.all(lengths == lengths[0])):
        # The writer's case: every row as long, the buffer is the matrix.
        matrix = flat.reshape(n, int(lengths[0]))
        if keep is not None:
            matrix, steps, lengths = matrix[keep], steps[keep], lengths[keep]
        return Rows(steps, matrix.astype(spec.dtype, copy=False), lengths)
    starts = np.cumsum(lengths) - lengths
    if keep is not None:
        steps, lengths, starts = steps[keep], lengths[keep], starts[keep]
    values = np.full((steps.shape[0], int(lengths.max())), fill, dtype=spec.dtype)
    # Scatter the ragged rows: row index and column of every kept element.
    rows = np.repeat(np.arange(steps.shape[0]), lengths)
    cols = np.arange(rows.shape[0]) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    values[rows, cols] = flat[np.repeat(starts, lengths) + cols]
    return Rows(steps, values, lengths)


def decode_tag_rows(tag: str, steps: Iterable[int], tensors: Iterable,
                    note: Note | None = None, max_width: int = MAX_ROWS) -> Rows:
    """``decode_rows`` with the dtype and fill of ``tag`` (``row_format``)."""
    dtype, fill = row_format(tag)
    return decode_rows(steps, tensors, dtype, fill, note, tag, max_width)


# ---------------------------------------------------------------------------
# JSON string scalars


def _string_scalar(tensor) -> str:
    """The text of a string-scalar tensor; ValueError for anything else."""
    if isinstance(tensor, np.ndarray):
        if tensor.dtype.kind not in "OSU" or tensor.size != 1:
            raise ValueError("not a string scalar")
        raw = tensor.reshape(-1)[0]
    else:
        if tensor.dtype != types_pb2.DT_STRING or len(tensor.string_val) != 1:
            raise ValueError("not a string scalar")
        raw = tensor.string_val[0]
    if isinstance(raw, bytes):
        return raw.decode("utf-8")
    if isinstance(raw, str):
        return raw
    raise ValueError("not a string scalar")


def decode_json(steps: Iterable[int], tensors: Iterable, note: Note | None = None,
                tag: str = "JSON", walls: Iterable[float] | None = None) -> JsonRecords:
    """Parse the JSON string scalars of one tag, in the order given.

    Every record counts (two event records at one step are both kept).
    Unreadable ones (not a string scalar, not UTF-8, not JSON, nested too
    deep to parse) are skipped with a note. ``walls``: the records' wall
    times, kept beside the readable ones.
    """
    note = note or _ignore
    kept, values, text_bytes = [], [], 0
    timed = walls is not None
    walls = list(walls) if timed else None
    kept_walls = []
    skips = _Skips(tag)
    for i, (step, tensor) in enumerate(zip(steps, tensors)):
        try:
            text = _string_scalar(tensor)
            value = json.loads(text)
        except (ValueError, TypeError, RecursionError) as e:
            # json.JSONDecodeError and UnicodeDecodeError are ValueErrors.
            skips.add(step, f"{type(e).__name__}: {e}"[:200])
            continue
        kept.append(int(step))
        values.append(value)
        text_bytes += len(text)
        if timed:
            kept_walls.append(float(walls[i]) if i < len(walls) else float("nan"))
    skips.tell(note)
    return JsonRecords(np.asarray(kept, dtype=np.int64), values, text_bytes,
                       np.asarray(kept_walls, dtype=np.float64) if timed else None)


# ---------------------------------------------------------------------------
# Run-level values; ``records`` are (step, parsed JSON) pairs in written order


def _layer(index: int, item) -> tuple[dict, bool]:
    """One entry of a layer list as {"name", "type"}, and whether it had a name.
    A type that is not a string is dropped (never ``str()``-ed: a nested
    value has no useful text, and making one can recurse without end)."""
    kind = item.get("type") if isinstance(item, dict) else ""
    kind = kind[:MAX_NAME] if isinstance(kind, str) else ""
    name = item.get("name") if isinstance(item, dict) else None
    extra = {k: item[k][:MAX_NAME] for k in metadata.LAYER_EXTRAS
             if isinstance(item, dict) and isinstance(item.get(k), str)}
    if isinstance(name, str) and 0 < len(name) <= MAX_NAME:
        return {"name": name, "type": kind, **extra}, True
    return {"name": metadata.unnamed_row(index), "type": kind, **extra}, False


def layer_list(records: Iterable[tuple[int, Any]], width: int = 0,
               note: Note | None = None) -> list[dict]:
    """The run's layer list: the newest ``{"layers": [...]}`` record's rows.

    The writer only appends to the list, so a row index never changes
    meaning; a newer list that does not extend the older one is trusted,
    with a note. A row without a name, in the list or beyond it up to
    ``width`` rows (the widest stored row), is named
    ``metadata.unnamed_row(i)``, the same everywhere.
    """
    note = note or _ignore
    current: list = []
    for step, payload in records:
        raw = payload.get("layers") if isinstance(payload, dict) else None
        if not isinstance(raw, list):
            note(f"skipped a layer list at step {step}: no 'layers' list")
            continue
        entries = [_layer(i, item) for i, item in enumerate(raw)]
        layers = [layer for layer, _ in entries]
        unnamed = sum(1 for _, named in entries if not named)
        if unnamed:
            note(f"the layer list at step {step}: {unnamed} of {len(raw)} entries without a "
                 "name; named by row number")
        if layers[: len(current)] != current:
            note(f"the layer list changed at step {step} (it should only grow)")
        current = layers
    if width > len(current):
        note(f"{width - len(current)} rows have no layer name; named by row number")
        current = current + [_layer(i, None)[0] for i in range(len(current), width)]
    return current


def run_events(records: Iterable[tuple[int, Any]], note: Note | None = None) -> list[dict]:
    """Every event dict of the run's ``neuraldbg/events`` records, in the
    order written; a record that is not a list, or an event that is not an
    object, is skipped with a note."""
    note = note or _ignore
    events = []
    for step, payload in records:
        if not isinstance(payload, list):
            note(f"skipped an events record at step {step}: not a list")
            continue
        for event in payload:
            if isinstance(event, dict):
                events.append(event)
            else:
                note(f"skipped an event at step {step}: not an object")
    return events


def _objects(records: Iterable[tuple[int, Any]], what: str, note: Note | None) -> list[dict]:
    note = note or _ignore
    out = []
    for step, payload in records:
        if isinstance(payload, dict):
            out.append(payload)
        else:
            note(f"skipped a {what} at step {step}: not an object")
    return out


def last_diagnosis(records: Iterable[tuple[int, Any]], note: Note | None = None) -> dict | None:
    """The last diagnosis object written (the current one), or None."""
    found = _objects(records, "diagnosis", note)
    return found[-1] if found else None


def run_config(records: Iterable[tuple[int, Any]], note: Note | None = None) -> dict | None:
    """The writer's settings (the first config object written), or None."""
    found = _objects(records, "config", note)
    return found[0] if found else None
