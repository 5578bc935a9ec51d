"""Hostile logdirs: each builder writes one kind of bad input, to be put beside good runs.

    from tests.hostile import PluginApp, bad_tensor_run, frame, good_runs, records

    truths = good_runs(tmp_path)                  # "good/healthy" and "good/failing"
    bad_tensor_run(tmp_path, "bad", "dtype")     # a stats record TensorBoard cannot decode
    app = PluginApp(tmp_path)                     # the plugin over TensorBoard's Python loader
    app.every_route("bad")                        # {path: status}, asserting no 500

Everything here writes real event files (TensorBoard's own ``EventFileWriter``
for the good parts; raw TFRecord frames, with correct or deliberately wrong
checksums, for the bad ones), so the reader, the plugin and a real
``tensorboard`` all see the same bytes.
"""

from __future__ import annotations

import json
import os
import struct
import time
import urllib.parse
from typing import Iterable

import numpy as np
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_provider as tb_data_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow as _stub
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.plugins import base_plugin
from tensorboard.util import tensor_util
from werkzeug import test as werkzeug_test

from tb_neuraldbg import metadata
from tb_neuraldbg.format import summary
from tb_neuraldbg.server import plugin
from tests.synthetic import Plant, SyntheticWriter, event, make_layers, write_run

__all__ = [
    "GOOD",
    "PluginApp",
    "good_runs",
    "masked_crc",
    "frame",
    "records",
    "event_file",
    "write_frames",
    "raw_value",
    "add_event",
    "nested_json",
    "nested_json_run",
    "BAD_TENSORS",
    "bad_tensor_run",
    "broadcast_run",
    "future_run",
    "long_message_run",
    "many_events_run",
    "foreign_scalars",
]

# The good runs every hostile test keeps next to its bad input.
GOOD = ("good/failing", "good/healthy")
PLUGIN_ROUTES = "/data/plugin/neuraldbg"


def good_runs(logdir) -> dict:
    """Write a healthy and a failing run under ``logdir/good``; their truths by name."""
    return {
        "good/healthy": write_run(logdir, "good/healthy", num_modules=2, num_steps=12, seed=1),
        "good/failing": write_run(
            logdir, "good/failing", num_modules=3, num_steps=30, seed=2,
            plants=[Plant(20, "fc1", "exploding", {"grad_norm": 4e6}, until=29)],
            events=[event(20, "fc1", "exploding_gradient", value=4e6)],
        ),
    }


class _Generic:
    """A data provider that is not TensorBoard's MultiplexerDataProvider: the
    plugin reads it through the public read_tensors."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)


class PluginApp:
    """The plugin in TensorBoard's WSGI app over TensorBoard's Python loader."""

    def __init__(self, logdir, generic: bool = False):
        self.mux = plugin_event_multiplexer.EventMultiplexer(
            tensor_size_guidance={metadata.PLUGIN_NAME: 0})
        self.mux.AddRunsFromDirectory(str(logdir))
        self.mux.Reload()
        provider = tb_data_provider.MultiplexerDataProvider(self.mux, str(logdir))
        if generic:
            provider = _Generic(provider)
        ctx = base_plugin.TBContext(logdir=str(logdir), data_provider=provider,
                                    multiplexer=self.mux)
        self.plugin = plugin.NeuralDbgLoader().load(ctx)
        self.client = werkzeug_test.Client(
            application.TensorBoardWSGI([self.plugin], data_provider=provider))

    def get(self, path: str):
        r = self.client.get(PLUGIN_ROUTES + path)
        assert r.status_code != 500, (path, r.get_data(as_text=True)[:300])
        return r

    def json(self, path: str):
        r = self.get(path)
        assert r.status_code == 200, (path, r.status_code, r.get_data(as_text=True)[:300])
        return json.loads(r.get_data(as_text=True))

    def every_route(self, run: str, layer: str = "fc0") -> dict:
        """Status of every route for ``run``: never a 500."""
        q = urllib.parse.quote(run)
        paths = [
            "/runs", "/report", f"/meta?run={q}", f"/heatmap?run={q}&metric=grad_norm",
            f"/heatmap?run={q}&metric=state&format=b64", f"/events?run={q}",
            f"/layer?run={q}&layer={layer}",
        ]
        return {p: self.get(p).status_code for p in paths}


# -- TFRecord framing -----------------------------------------------------------


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC32C (TensorBoard's own pure-Python one)."""
    return _stub.masked_crc32c(data)


def frame(data: bytes, *, length: int | None = None, data_crc: int | None = None) -> bytes:
    """One TFRecord: ``length`` (default: the real one) with a valid length
    CRC, the data, and ``data_crc`` (default: the valid one)."""
    n = len(data) if length is None else length
    head = struct.pack("<Q", n)
    crc = masked_crc(data) if data_crc is None else data_crc
    return head + struct.pack("<I", masked_crc(head)) + data + struct.pack("<I", crc)


def records(path) -> list[tuple[int, bytes]]:
    """(offset, data) of every record of a well-formed event file."""
    raw = open(path, "rb").read()
    out, pos = [], 0
    while pos < len(raw):
        (n,) = struct.unpack_from("<Q", raw, pos)
        out.append((pos, raw[pos + 12 : pos + 12 + n]))
        pos += 12 + n + 4
    return out


def event_file(run_dir) -> str:
    """The one event file of a run directory."""
    (name,) = [f for f in os.listdir(run_dir) if "tfevents" in f]
    return os.path.join(run_dir, name)


def write_frames(path, frames: Iterable[bytes], *, append: bool = True) -> None:
    with open(path, "ab" if append else "wb") as f:
        for fr in frames:
            f.write(fr)


# -- neuraldbg values -------------------------------------------------------------


def raw_value(tag: str, tensor: tensor_pb2.TensorProto, kind: str = "raw",
              version: int | None = None) -> summary_pb2.Summary.Value:
    """A neuraldbg Summary.Value with metadata (``version`` overrides the format version)."""
    meta = metadata.create_summary_metadata({"kind": kind})
    if version is not None:
        meta.plugin_data.content = json.dumps({"version": version, "kind": kind}).encode()
    return summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=tensor)


def string_tensor(text) -> tensor_pb2.TensorProto:
    return tensor_util.make_tensor_proto(np.array(text, dtype=object))


def add_event(writer: EventFileWriter, step: int, values) -> None:
    writer.add_event(event_pb2.Event(step=step, wall_time=time.time(),
                                     summary=summary_pb2.Summary(value=list(values))))


def nested_json(depth: int) -> str:
    """A few KB of JSON nested ``depth`` deep (lists in dicts in lists...)."""
    return '{"a":[' * depth + "1" + "]}" * depth


def nested_json_run(logdir, run: str, tag: str, depth: int = 3000) -> None:
    """A small run whose ``tag`` also holds one record nested ``depth`` deep
    (and, for events, one nested just under the parser's limit inside an
    otherwise valid event)."""
    with SyntheticWriter(logdir, run, make_layers(1)) as w:
        w.step(0, events=[event(0, "fc0", "dead_activation")])
        w.step(1)
        w._add(summary_pb2.Summary(value=[raw_value(tag, string_tensor(nested_json(depth)))]),
               1, None)
        if tag == metadata.TAG_EVENTS:
            deep = event(1, "fc0", "nonfinite")
            deep["step"] = json.loads(nested_json(400))
            deep["layer"] = json.loads(nested_json(400))
            w._add(summary.events_summary([deep]), 1, None)
        if tag == metadata.TAG_LAYERS:
            layers = {"layers": [{"name": "fc0", "type": json.loads(nested_json(400))}]}
            w._add(summary_pb2.Summary(value=[raw_value(tag, string_tensor(json.dumps(layers)))]),
                   1, None)
        w.step(2)


def _bad_proto(kind: str, n: int) -> tensor_pb2.TensorProto:
    """A float32 row proto broken in one way."""
    row = np.ones(n, np.float32)
    proto = tensor_util.make_tensor_proto(row)
    if kind == "dtype":
        proto.dtype = 999
    elif kind == "content":
        proto.tensor_content = row.tobytes() + b"\x00"
    elif kind == "negative":
        proto.tensor_shape.dim[0].size = -1
    elif kind == "huge":
        proto.tensor_shape.dim[0].size = 10**12
    elif kind == "2d":
        proto = tensor_util.make_tensor_proto(np.ones((n, 2), np.float32))
    else:
        raise ValueError(kind)
    return proto


# The ways _bad_proto breaks a tensor.
BAD_TENSORS = ("dtype", "content", "negative", "huge", "2d")


def bad_tensor_run(logdir, run: str, kind: str, num_steps: int = 6) -> int:
    """A run of ``num_steps`` good steps, then one more whose grad_norm and
    states records are broken as ``kind`` says (its other metrics are fine).
    Returns the number of rows."""
    layers = make_layers(2)
    n = len(layers)
    with SyntheticWriter(logdir, run, layers) as w:
        for s in range(num_steps):
            w.step(s)
        summ = summary.stats_summary(np.ones((n, len(metadata.METRICS)), np.float32),
                                     np.zeros(n, np.uint8))
        for value in summ.value:
            if value.tag == metadata.stats_tag("grad_norm"):
                value.tensor.CopyFrom(_bad_proto(kind, n))
            elif value.tag == metadata.TAG_STATES:
                value.tensor.CopyFrom(_bad_states(kind, n))
        w._add(summ, num_steps, None)
    return n


def _bad_states(kind: str, n: int) -> tensor_pb2.TensorProto:
    """A uint8 states proto broken like ``_bad_proto``'s float rows."""
    proto = _bad_proto(kind, n)
    if kind in ("2d",):
        return tensor_util.make_tensor_proto(np.zeros((n, 2), np.uint8))
    if kind != "dtype":
        proto.dtype = types_pb2.DT_UINT8
        content = b"\x00" * (n + 1 if kind == "content" else n)
        proto.tensor_content = content
    return proto


def broadcast_run(logdir, run: str, num_records: int = 40, size: int = 1 << 20) -> None:
    """A few KB: ``num_records`` steps of every metric as [size]-shaped tensors
    holding one value (TensorFlow broadcasts it), after a 3-row layer list."""
    layers = make_layers(1)
    w = EventFileWriter(os.path.join(str(logdir), run))
    add_event(w, 0, [raw_value(metadata.TAG_LAYERS,
                               string_tensor(json.dumps({"layers": layers})), "layers")])
    for s in range(num_records):
        values = []
        for tag in [metadata.stats_tag(m) for m in metadata.METRICS] + [metadata.TAG_STATES]:
            dtype = types_pb2.DT_UINT8 if tag == metadata.TAG_STATES else types_pb2.DT_FLOAT
            proto = tensor_pb2.TensorProto(dtype=dtype)
            proto.tensor_shape.dim.add(size=size)
            if dtype == types_pb2.DT_FLOAT:
                proto.float_val.append(1.0)
            else:
                proto.int_val.append(0)
            values.append(raw_value(tag, proto) if s == 0 else
                          summary_pb2.Summary.Value(tag=tag, tensor=proto))
        add_event(w, s, values)
    w.close()


def future_run(logdir, run: str, version: int) -> None:
    """A run written by a newer writer: every tag says format ``version``."""
    layers = make_layers(1)
    n = len(layers)
    w = EventFileWriter(os.path.join(str(logdir), run))
    add_event(w, 0, [raw_value(metadata.TAG_LAYERS, string_tensor(json.dumps({"layers": layers})),
                               "layers", version)])
    row = tensor_util.make_tensor_proto(np.ones(n, np.float32))
    states = tensor_util.make_tensor_proto(np.zeros(n, np.uint8))
    add_event(w, 0, [raw_value(metadata.stats_tag("grad_norm"), row, "stats", version),
                     raw_value(metadata.TAG_STATES, states, "states", version)])
    add_event(w, 0, [raw_value(metadata.TAG_DIAGNOSIS, string_tensor(json.dumps(
        {"status": "healthy", "root_cause": None})), "diagnosis", version)])
    w.close()


def long_message_run(logdir, run: str, chars: int) -> None:
    """A failing run whose root cause and one event have a ``chars``-long message
    without a single space."""
    message = "x" * chars
    write_run(logdir, run, num_modules=1, num_steps=4,
              events=[event(1, "fc0", "nonfinite", message=message),
                      event(2, "fc0", "dead_activation", message="y" * chars)])


def many_events_run(logdir, run: str, num_events: int, num_steps: int = 20,
                    per_record: int = 10_000) -> None:
    """A run with ``num_events`` events on two layers, written ``per_record`` a record."""
    layers = make_layers(2)
    with SyntheticWriter(logdir, run, layers, keep_truth=False) as w:
        todo = num_events
        for s in range(num_steps):
            batch = []
            if s == num_steps - 1:
                k = todo
            else:
                k = min(todo, per_record)
            for i in range(k):
                layer = "fc0" if i % 2 else "fc1"
                batch.append(event(s, layer, "dead_activation" if i % 3 else "nonfinite",
                                   message=f"event {i} at step {s}"))
            todo -= k
            # SyntheticWriter would re-derive the diagnosis from every event so far
            # (quadratic): give it one.
            w.step(s, events=batch, diagnosis={"status": "failing", "root_cause": None})


def foreign_scalars(run_dir, num_events: int, tags: int = 10, *, name: str | None = None) -> str:
    """Another tool's plain scalars (``simple_value``), in an event file of
    their own in ``run_dir``; returns its path."""
    os.makedirs(run_dir, exist_ok=True)
    w = EventFileWriter(str(run_dir), max_queue_size=1000, flush_secs=3600,
                        filename_suffix=name or ".other")
    tag_names = [f"other/metric{i}" for i in range(tags)]
    for i in range(num_events):
        w.add_event(event_pb2.Event(step=i // tags, wall_time=1.0 + i, summary=summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=tag_names[i % tags], simple_value=float(i))])))
    w.close()
    return [os.path.join(run_dir, f) for f in os.listdir(run_dir) if f.endswith(name or ".other")][0]
