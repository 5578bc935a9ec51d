"""format.decode: the one decoder of stored neuraldbg tensors, for the reader and the plugin."""

from __future__ import annotations

import json
import logging
import os
import tracemalloc

import numpy as np
import pytest
from tensorboard import context as tb_context
from tensorboard.backend.event_processing import data_provider as tb_data_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins import base_plugin
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

from tb_neuraldbg import metadata
from tb_neuraldbg.format import decode, summary
from tb_neuraldbg.reader import NeuralDbgDataWarning, read_logdir
from tb_neuraldbg.server import plugin
from tests.synthetic import event

F32, U8 = np.float32, np.uint8


def content_proto(row):
    """A TensorProto with the values in tensor_content (what the writer stores)."""
    return tensor_util.make_tensor_proto(np.asarray(row))


def values_proto(row):
    """The same tensor with its values in float_val / int_val (other writers)."""
    row = np.asarray(row)
    proto = tensor_util.make_tensor_proto(row)
    for name in ("tensor_content", "float_val", "int_val"):
        proto.ClearField(name)
    if row.dtype == F32:
        proto.float_val.extend(float(x) for x in row)
    else:
        proto.int_val.extend(int(x) for x in row)
    return proto


def decode_all_ways(steps, rows, dtype, fill):
    """Rows of the same records as raw content, as float_val/int_val, as arrays."""
    return [
        decode.decode_rows(steps, [content_proto(r) for r in rows], dtype, fill),
        decode.decode_rows(steps, [values_proto(r) for r in rows], dtype, fill),
        decode.decode_rows(steps, [np.asarray(r) for r in rows], dtype, fill),
    ]


def assert_rows_equal(a, b):
    np.testing.assert_array_equal(a.steps, b.steps)
    np.testing.assert_array_equal(a.values, b.values)  # NaN == NaN here
    np.testing.assert_array_equal(a.lengths, b.lengths)
    assert a.values.dtype == b.values.dtype and a.steps.dtype == np.int64


# -- per-step rows ------------------------------------------------------------


def test_bulk_and_fallback_paths_agree():
    rng = np.random.default_rng(0)
    rows = [rng.standard_normal(6).astype(F32) for _ in range(5)]
    rows[2][3] = np.nan
    rows[4][0] = -np.inf
    bulk, values, arrays = decode_all_ways(range(5), rows, F32, np.nan)
    np.testing.assert_array_equal(bulk.values, np.stack(rows))
    assert bulk.values.flags.writeable and arrays.values.flags.writeable
    assert_rows_equal(bulk, values)
    assert_rows_equal(bulk, arrays)
    # Mixed in one series: the proto falls back record by record.
    mixed = [content_proto(rows[0]), values_proto(rows[1]), rows[2]]
    assert_rows_equal(decode.decode_rows(range(3), mixed, F32, np.nan),
                      decode.decode_rows(range(3), rows[:3], F32, np.nan))


def test_rows_copied_as_decoded_agree_with_every_other_path():
    """The bulk path copies each record into one buffer as it is decoded: a
    record of another length or kind after some of them, a record skipped
    between them, and a series without a length (a generator) give the
    rows the other paths give."""
    rng = np.random.default_rng(1)
    rows = [rng.standard_normal(4).astype(F32) for _ in range(6)]
    want = decode.decode_rows(range(6), rows, F32, np.nan)  # (arrays: no buffer)
    protos = [content_proto(r) for r in rows]
    assert_rows_equal(decode.decode_rows(range(6), protos, F32, np.nan), want)
    assert_rows_equal(decode.decode_rows(range(6), iter(protos), F32, np.nan), want)
    bad = tensor_util.make_tensor_proto(np.zeros((2, 2), F32))  # 2-D: skipped
    got = decode.decode_rows([0, 1, 2, 9, 3, 4, 5], protos[:3] + [bad] + protos[3:], F32, np.nan)
    assert_rows_equal(got, want)
    assert got.values.flags.writeable
    longer = protos[:4] + [content_proto(np.arange(5, dtype=F32)), values_proto(rows[5])]
    got = decode.decode_rows(range(6), longer, F32, np.nan)
    expect = np.full((6, 5), np.nan, F32)
    for i in (0, 1, 2, 3, 5):
        expect[i, :4] = rows[i]
    expect[4] = np.arange(5)
    np.testing.assert_array_equal(got.values, expect)
    assert got.lengths.tolist() == [4, 4, 4, 4, 5, 4]


def test_ragged_rows_are_padded_with_the_fill():
    rows = [np.array([1, 2], U8), np.array([3, 4, 5], U8), np.array([6], U8)]
    for got in decode_all_ways([0, 1, 2], rows, U8, metadata.STATE_UNKNOWN):
        assert got.values.tolist() == [[1, 2, 255], [3, 4, 5], [6, 255, 255]]
        assert got.lengths.tolist() == [2, 3, 1] and got.values.dtype == U8
    floats = [np.array([1, 2], F32), np.array([3, 4, 5], F32)]
    got = decode.decode_tag_rows(metadata.stats_tag("grad_norm"), [4, 5],
                                 [content_proto(r) for r in floats])
    np.testing.assert_array_equal(got.values, [[1, 2, np.nan], [3, 4, 5]])


def test_repeated_steps_keep_the_last_record_in_step_order():
    steps = [2, 0, 2, 1, 0]
    uniform = [np.full(2, v, F32) for v in (20, 0, 21, 1, 1)]
    ragged = [np.full(n, v, F32) for n, v in ((3, 20), (1, 0), (2, 21), (2, 1), (1, 1))]
    for got in decode_all_ways(steps, uniform, F32, np.nan):
        assert got.steps.tolist() == [0, 1, 2]
        assert got.values.tolist() == [[1, 1], [1, 1], [21, 21]]
    for got in decode_all_ways(steps, ragged, F32, np.nan):
        assert got.steps.tolist() == [0, 1, 2] and got.lengths.tolist() == [1, 2, 2]
        np.testing.assert_array_equal(got.values, [[1, np.nan], [1, 1], [21, 21]])


def test_malformed_protos_are_skipped_with_a_note():
    good = content_proto(np.array([1, 2, 3], F32))
    wrong_dtype = content_proto(np.array([1, 2, 3], np.float64))
    short = content_proto(np.array([1, 2, 3], F32))
    short.tensor_content = short.tensor_content[:-2]
    two_d = content_proto(np.ones((2, 3), F32))
    absurd = values_proto(np.array([1], F32))
    absurd.tensor_shape.dim[0].size = 10**12  # 4 TB if trusted
    absurd_content = content_proto(np.array([1], F32))
    absurd_content.tensor_shape.dim[0].size = decode.MAX_ROWS + 1
    string = tensor_util.make_tensor_proto(np.array(b"[1]", dtype=object))
    notes = []
    got = decode.decode_rows(range(7), [good, wrong_dtype, short, two_d, absurd,
                                        absurd_content, string],
                             F32, np.nan, notes.append, "neuraldbg/stats/x")
    assert got.steps.tolist() == [0] and got.values.tolist() == [[1, 2, 3]]
    assert len(notes) == 6
    assert all(n.startswith(f"skipped a neuraldbg/stats/x record at step {i}: "
                            "not a 1-D float32 tensor") for i, n in enumerate(notes, 1))
    assert "dtype float64" in notes[0] and "10 bytes of content for 3 values" in notes[1]
    assert "2 dimensions" in notes[2] and "1000000000000 rows" in notes[3]
    assert "beyond the limit" in notes[4] and "dtype string" in notes[5]


def test_malformed_arrays_are_skipped_with_a_note():
    notes = []
    got = decode.decode_rows(
        range(5),
        [np.array([1, 1], U8), np.array([1, 1], np.int8), np.zeros((2, 2), U8),
         np.array(b"x", dtype=object), np.array([2, 2], U8)],
        U8, metadata.STATE_UNKNOWN, notes.append, metadata.TAG_STATES)
    assert got.steps.tolist() == [0, 4] and got.values.tolist() == [[1, 1], [2, 2]]
    assert [n.split(": ", 1)[0] for n in notes] == [
        f"skipped a neuraldbg/states record at step {i}" for i in (1, 2, 3)]
    assert all("not a 1-D uint8 tensor" in n for n in notes)


def test_empty_series_and_absurd_lengths_allocate_nothing():
    empty = decode.decode_rows([], [], F32, np.nan)
    assert empty.steps.shape == (0,) and empty.values.shape == (0, 0)
    assert empty.values.dtype == F32 and empty.lengths.shape == (0,)
    proto = values_proto(np.array([1], F32))
    proto.tensor_shape.dim[0].size = 2**62
    tracemalloc.start()
    try:
        assert decode.decode_rows([0], [proto], F32, np.nan).values.shape == (0, 0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak  # nothing of the 2**62 values it was told of
    with pytest.raises(ValueError):
        decode.decode_rows([], [], np.float64, np.nan)  # not a stored row type


def test_row_format_follows_the_tag():
    assert decode.row_format(metadata.TAG_STATES) == (np.dtype(U8), metadata.STATE_UNKNOWN)
    dtype, fill = decode.row_format(metadata.stats_tag("act_std"))
    assert dtype == np.dtype(F32) and np.isnan(fill)


# -- JSON string scalars ------------------------------------------------------


def string_proto(text):
    return tensor_util.make_tensor_proto(np.array(text, dtype=object))


def test_json_records_keep_the_order_given_and_skip_garbage():
    texts = [b'[{"a": 1}]', b"{oops", b'[{"b": 2}]', "\xff".encode("latin-1"),
             b"[" * 100000, b'{"c": 3}']
    steps = [1, 0, 1, 2, 3, 0]
    for tensors in ([string_proto(t) for t in texts],
                    [np.array(t, dtype=object) for t in texts]):
        notes = []
        got = decode.decode_json(steps, tensors, notes.append, metadata.TAG_EVENTS)
        assert got.steps.tolist() == [1, 1, 0]  # written order, repeats kept
        assert got.values == [[{"a": 1}], [{"b": 2}], {"c": 3}]
        assert got.text_bytes == len(b'[{"a": 1}]') * 2 + len(b'{"c": 3}')
        assert [n.split(":")[0] for n in notes] == [
            f"skipped a neuraldbg/events record at step {s}" for s in (0, 2, 3)]
        assert "JSONDecodeError" in notes[0] and "UnicodeDecodeError" in notes[1]
        assert "RecursionError" in notes[2]


def test_json_needs_a_string_scalar():
    notes = []
    pair = tensor_util.make_tensor_proto(np.array([b"1", b"2"], dtype=object))
    got = decode.decode_json([0, 1, 2, 3], [content_proto(np.array([1.0], F32)), pair,
                                            np.array(1.5), np.array("[2]")], notes.append)
    assert got.values == [[2]] and got.steps.tolist() == [3]
    # Records skipped for one reason are one note.
    assert notes == ["skipped 3 JSON records (steps 0 to 2): ValueError: not a string scalar"]


# -- run-level values ---------------------------------------------------------


def test_layer_list_grows_and_names_rows_without_a_name():
    a, b = {"name": "fc0", "type": "Linear"}, {"name": "fc1", "type": "ReLU"}
    notes = []
    records = [(0, {"layers": [a]}), (1, "garbage"), (2, {"layers": [a, b]})]
    assert decode.layer_list(records, 0, notes.append) == [a, b]
    assert notes == ["skipped a layer list at step 1: no 'layers' list"]
    notes.clear()
    got = decode.layer_list(records + [(3, {"layers": [b, {"type": "GELU"}, 7]})], 4, notes.append)
    assert got == [b, {"name": metadata.unnamed_row(1), "type": "GELU"},
                   {"name": metadata.unnamed_row(2), "type": ""},
                   {"name": metadata.unnamed_row(3), "type": ""}]
    assert notes == ["skipped a layer list at step 1: no 'layers' list",
                     "the layer list at step 3: 2 of 3 entries without a name; named by row number",
                     "the layer list changed at step 3 (it should only grow)",
                     "1 rows have no layer name; named by row number"]
    assert decode.layer_list([], 2) == [{"name": "<row 0>", "type": ""},
                                        {"name": "<row 1>", "type": ""}]


def test_events_diagnosis_and_config():
    notes = []
    e0, e1 = {"step": 0, "kind": "a"}, {"step": 1, "kind": "b"}
    events = [(0, [e0]), (1, {"not": "a list"}), (1, [e1, "x"])]
    assert decode.run_events(events, notes.append) == [e0, e1]
    assert notes == ["skipped an events record at step 1: not a list",
                     "skipped an event at step 1: not an object"]
    first, last = {"status": "healthy"}, {"status": "failing"}
    notes.clear()
    assert decode.last_diagnosis([(0, first), (5, last), (6, [])], notes.append) == last
    assert notes == ["skipped a diagnosis at step 6: not an object"]
    assert decode.last_diagnosis([]) is None
    assert decode.run_config([(0, "x"), (0, {"a": 1}), (1, {"a": 2})]) == {"a": 1}
    assert decode.run_config([]) is None


# -- the reader and the plugin decode alike -----------------------------------


def _json_value(tag, payload):
    meta = metadata.create_summary_metadata({"kind": tag.rsplit("/", 1)[-1]})
    proto = tensor_util.make_tensor_proto(np.array(json.dumps(payload).encode(), dtype=object))
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, metadata=meta,
                                                                tensor=proto)])


def _plugin(logdir):
    mux = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={metadata.PLUGIN_NAME: 0})
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    provider = tb_data_provider.MultiplexerDataProvider(mux, str(logdir))
    ctx = base_plugin.TBContext(logdir=str(logdir), data_provider=provider, multiplexer=mux)
    return plugin.NeuralDbgLoader().load(ctx)


def test_reader_and_plugin_name_rows_alike(tmp_path, caplog):
    """Four stored rows, a layer list of three of which one has no name."""
    os.makedirs(tmp_path / "anon")
    w = EventFileWriter(str(tmp_path / "anon"))
    layers = {"layers": [{"name": "fc0", "type": "Linear"}, {"type": "ReLU"},
                         {"name": "fc2", "type": "Linear"}]}
    w.add_event(event_pb2.Event(step=0, summary=_json_value(metadata.TAG_LAYERS, layers)))
    row = np.ones((4, len(metadata.METRICS)), F32)
    for step in range(3):
        w.add_event(event_pb2.Event(step=step, summary=summary.stats_summary(row, np.zeros(4, U8))))
    w.close()
    with pytest.warns(NeuralDbgDataWarning) as record:
        (run,) = read_logdir(tmp_path)
    assert [str(r.message) for r in record] == [
        "run 'anon': the layer list at step 0: 1 of 3 entries without a name; named by row number",
        "run 'anon': 1 rows have no layer name; named by row number"]
    expected = ["fc0", metadata.unnamed_row(1), "fc2", metadata.unnamed_row(3)]
    assert run.layer_names == expected
    tab = _plugin(tmp_path)
    ctx = tb_context.RequestContext()
    with caplog.at_level(logging.WARNING, logger="tb_neuraldbg.server.plugin_data"):
        meta = tab.meta_impl(ctx, "", "anon")
        tab.meta_impl(ctx, "", "anon")
    assert [l["name"] for l in meta["layers"]] == expected
    assert meta["layers"] == run.layers
    # Each note is logged once, though the layer list is read per request.
    logged = [r.getMessage() for r in caplog.records]
    assert sum("without a name" in m for m in logged) == 1
    assert sum("1 rows have no layer name" in m for m in logged) == 1


def test_reader_and_plugin_skip_the_same_bad_records(tmp_path, caplog):
    os.makedirs(tmp_path / "bad")
    w = EventFileWriter(str(tmp_path / "bad"))
    w.add_event(event_pb2.Event(step=0, summary=summary.layers_summary(
        [{"name": "fc0", "type": "Linear"}, {"name": "fc1", "type": "Linear"}])))
    w.add_event(event_pb2.Event(step=0, summary=summary.stats_summary(
        np.ones((2, len(metadata.METRICS)), F32), np.zeros(2, U8))))
    bad = summary.stats_summary(np.full((2, len(metadata.METRICS)), 2, F32), np.zeros(2, U8))
    bad.value[0].tensor.CopyFrom(tensor_util.make_tensor_proto(np.ones(2, np.float64)))
    w.add_event(event_pb2.Event(step=1, summary=bad))
    w.add_event(event_pb2.Event(step=1, summary=_json_value(metadata.TAG_DIAGNOSIS, [1])))
    w.add_event(event_pb2.Event(step=1, summary=_json_value(
        metadata.TAG_EVENTS, [event(1, "fc0", "nonfinite"), 3])))
    w.close()
    with pytest.warns(NeuralDbgDataWarning) as record:
        (run,) = read_logdir(tmp_path)
    warned = sorted(str(r.message).split(": ", 1)[1] for r in record)
    tab = _plugin(tmp_path)
    ctx = tb_context.RequestContext()
    metric = metadata.METRICS[0]
    with caplog.at_level(logging.WARNING, logger="tb_neuraldbg.server.plugin_data"):
        tab.heatmap_impl(ctx, "", "bad", metric, 0, 1, 10)
        (listed,) = tab.runs_impl(ctx, "")["runs"]
        events = tab.events_impl(ctx, "", "bad")
    logged = sorted(r.getMessage().split(": ", 2)[2] for r in caplog.records)
    assert logged == warned and len(warned) == 3
    assert [e["kind"] for e in events["events"]] == ["nonfinite"] == [e["kind"] for e in run.events]
    assert run.diagnosis is None and listed["run"] == "bad"
