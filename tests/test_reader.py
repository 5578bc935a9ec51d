"""tb_neuraldbg.reader: logdirs written with TensorBoard's own writer read back exactly."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

from tb_neuraldbg import metadata
from tb_neuraldbg.format import summary
from tb_neuraldbg.reader import FormatError, NeuralDbgDataWarning, read_logdir, read_run
from tests.synthetic import Plant, SyntheticWriter, event, make_layers, write_run

M = metadata.METRIC_INDEX


def _raw_writer(path):
    os.makedirs(path, exist_ok=True)
    return EventFileWriter(str(path), flush_secs=3600)


def _add(writer, step, summ):
    writer.add_event(event_pb2.Event(step=step, wall_time=time.time(), summary=summ))


def _string_value(tag, text, content=None):
    """A neuraldbg string-scalar value holding arbitrary (maybe broken) text or bytes."""
    meta = metadata.create_summary_metadata(content or {"kind": "raw"})
    return summary_pb2.Summary.Value(
        tag=tag, metadata=meta, tensor=tensor_util.make_tensor_proto(np.array(text, dtype=object))
    )


def _assert_matches(run, truth):
    assert run.name == truth.name
    assert run.layers == truth.layers
    assert run.metrics == metadata.METRICS
    np.testing.assert_array_equal(run.steps, truth.steps)
    assert run.steps.dtype == np.int64
    assert run.stats.dtype == np.float32 and run.states.dtype == np.uint8
    # assert_array_equal treats NaN == NaN: padding and "not measured" must survive.
    np.testing.assert_array_equal(run.stats, truth.stats)
    np.testing.assert_array_equal(run.states, truth.states)
    # The reader keeps the written order; the truth is the same, stably sorted by step.
    assert sorted(run.events, key=lambda e: e["step"]) == truth.events
    assert run.diagnosis == truth.diagnosis
    assert run.config == truth.config


def test_round_trip_with_planted_failure(tmp_path):
    truth = write_run(
        tmp_path,
        "mlp",
        num_modules=3,
        num_steps=40,
        plants=[Plant(step=12, layer="fc1", state="exploding", values={"grad_norm": 3e7}, until=39)],
        events=[event(12, "fc1", "exploding_gradient", value=3e7, value_before=0.01)],
        confirm_delay=3,
    )
    (run,) = read_logdir(tmp_path)
    _assert_matches(run, truth)
    row = truth.row("fc1")
    assert run.stats[12, row, M["grad_norm"]] == np.float32(3e7)
    assert run.states[12, row] == metadata.STATE_CODE["exploding"]
    # Extra keys of an event are kept by the reader (the report drops them).
    assert run.events[0]["value_before"] == 0.01
    assert run.diagnosis["status"] == "failing"
    assert run.diagnosis["root_cause"]["layer"] == "fc1"
    assert list(run.layer_counts) == [len(truth.layers)] * 40


def test_layer_growth_is_nan_padded(tmp_path):
    extra = [{"name": "head.proj", "type": "Linear"}, {"name": "head.act", "type": "GELU"}]
    truth = write_run(tmp_path, "grow", num_modules=2, num_steps=12, grow={5: extra[:1], 9: extra[1:]})
    (run,) = read_logdir(tmp_path)
    _assert_matches(run, truth)
    base = len(make_layers(2))
    assert run.layer_names[-2:] == ["head.proj", "head.act"]
    assert list(run.layer_counts) == [base] * 5 + [base + 1] * 4 + [base + 2] * 3
    assert np.isnan(run.stats[:5, base:]).all()
    assert (run.states[:5, base] == metadata.STATE_UNKNOWN).all()
    assert (run.states[5:, base] == 0).all()
    assert not np.isnan(run.stats[9:, base + 1, M["grad_norm"]]).any()


def test_nonfinite_values_and_strided_steps(tmp_path):
    plants = [
        Plant(step=30, layer="fc0", state="nonfinite", values={"grad_norm": np.inf, "act_mean": np.nan}),
        Plant(step=40, layer="<loss>", state="nonfinite", values={"value": -np.inf}),
    ]
    truth = write_run(tmp_path, "nan", num_steps=8, first_step=10, stride=10, plants=plants)
    (run,) = read_logdir(tmp_path)
    _assert_matches(run, truth)
    np.testing.assert_array_equal(run.steps, [10, 20, 30, 40, 50, 60, 70, 80])
    s = list(run.steps).index(30)
    assert np.isposinf(run.stats[s, truth.row("fc0"), M["grad_norm"]])
    assert np.isnan(run.stats[s, truth.row("fc0"), M["act_mean"]])
    assert np.isneginf(run.stats[s + 1, truth.row("<loss>"), M["value"]])


def test_run_names_follow_tensorboard(tmp_path):
    write_run(tmp_path, "", num_steps=3)  # event files in the logdir itself: run "."
    write_run(tmp_path, "sweep/lr_0.1", num_steps=3)
    write_run(tmp_path, "sweep/lr_1.0", num_steps=4)
    # A run without neuraldbg data (the user's own scalars only) is not a run here.
    w = _raw_writer(tmp_path / "plain")
    _add(w, 0, summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="loss", simple_value=1.0)]))
    w.close()
    runs = read_logdir(tmp_path)
    assert [r.name for r in runs] == [".", os.path.join("sweep", "lr_0.1"), os.path.join("sweep", "lr_1.0")]
    assert [r.num_steps for r in runs] == [3, 3, 4]


def test_read_run_reads_one_directory(tmp_path):
    truth = write_run(tmp_path, "one", num_steps=6, events=[event(2, "fc3", "dead_activation", value=0.9)])
    run = read_run(tmp_path / "one")
    _assert_matches(run, truth)
    assert read_run(tmp_path / "one", name="custom").name == "custom"
    with pytest.raises(ValueError, match="no neuraldbg data"):
        read_run(tmp_path)  # no event files directly in the logdir


def test_empty_and_missing_paths(tmp_path):
    assert read_logdir(tmp_path) == []
    with pytest.raises(FileNotFoundError):
        read_logdir(tmp_path / "missing")
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(NotADirectoryError):
        read_logdir(f)


def test_events_across_steps_and_last_diagnosis_wins(tmp_path):
    layers = make_layers(2)
    with SyntheticWriter(tmp_path, "r", layers) as w:
        w.step(0, events=[event(0, "<loss>", "initial_loss", value=9.1)])
        w.step(1)
        w.step(2, events=[event(1, "fc0", "exploding_gradient", value=1e5), event(2, "fc1", "exploding_gradient")])
        w.step(3, events=[event(3, "fc0", "exploding_gradient", from_state="exploding", to_state="healthy", severity="info")])
        truth = w.truth()
    (run,) = read_logdir(tmp_path)
    # Written order: grouped by the step they were confirmed at.
    assert [(e["step"], e["layer"]) for e in run.events] == [(0, "<loss>"), (1, "fc0"), (2, "fc1"), (3, "fc0")]
    assert run.diagnosis == truth.diagnosis
    assert run.diagnosis["root_cause"]["step"] == 0  # the initial_loss warning comes first


def test_bad_records_are_skipped_with_a_warning(tmp_path):
    layers = make_layers(1)
    n = len(layers)
    good = np.zeros((n, len(metadata.METRICS)), dtype=np.float32)
    w = _raw_writer(tmp_path / "bad")
    _add(w, 0, summary.layers_summary(layers))
    _add(w, 0, summary.stats_summary(good, np.zeros(n, np.uint8)))
    _add(w, 0, summary_pb2.Summary(value=[_string_value(metadata.TAG_EVENTS, "{not json")]))
    _add(w, 1, summary_pb2.Summary(value=[_string_value(metadata.TAG_EVENTS, json.dumps([1, "x", event(1, "fc0", "nonfinite")]))]))
    _add(w, 1, summary_pb2.Summary(value=[_string_value(metadata.TAG_DIAGNOSIS, "[]")]))
    _add(w, 1, summary_pb2.Summary(value=[_string_value(metadata.TAG_CONFIG, b"\xff\xfe{}")]))
    _add(w, 1, summary_pb2.Summary(value=[_string_value(metadata.TAG_EVENTS, "[" * 100000)]))
    # A stats tensor of the wrong shape (2-D) at step 1: skipped, the rest of the step kept.
    bad_stats = summary.stats_summary(good + 1, np.zeros(n, np.uint8))
    bad_stats.value[0].tensor.CopyFrom(tensor_util.make_tensor_proto(np.ones((2, 2), np.float32)))
    _add(w, 1, bad_stats)
    w.close()
    with pytest.warns(NeuralDbgDataWarning) as record:
        (run,) = read_logdir(tmp_path)
    messages = " ".join(str(r.message) for r in record)
    assert "neuraldbg/events" in messages and "not an object" in messages
    assert "not a 1-D float32 tensor" in messages
    assert [e["layer"] for e in run.events] == ["fc0"]
    assert run.diagnosis is None
    np.testing.assert_array_equal(run.steps, [0, 1])
    assert np.isnan(run.stats[1, :, M["grad_norm"]]).all()  # the skipped record
    assert (run.stats[1, :, M["grad_nonfinite"]] == 1).all()  # the rest of step 1


def test_rows_without_names_get_placeholders(tmp_path):
    w = _raw_writer(tmp_path / "anon")
    _add(w, 0, summary.stats_summary(np.ones((3, len(metadata.METRICS)), np.float32)))
    w.close()
    with pytest.warns(NeuralDbgDataWarning, match="no layer name"):
        (run,) = read_logdir(tmp_path)
    assert run.layer_names == ["<row 0>", "<row 1>", "<row 2>"]
    assert (run.states == metadata.STATE_UNKNOWN).all()  # no states tag was written


def test_rewritten_step_keeps_the_last_record(tmp_path):
    layers = make_layers(1)
    n, m = len(layers), len(metadata.METRICS)
    w = _raw_writer(tmp_path / "dup")
    _add(w, 0, summary.layers_summary(layers))
    _add(w, 0, summary.stats_summary(np.full((n, m), 1, np.float32)))
    _add(w, 1, summary.stats_summary(np.full((n, m), 2, np.float32)))
    _add(w, 1, summary.stats_summary(np.full((n, m), 3, np.float32)))
    w.close()
    (run,) = read_logdir(tmp_path)
    np.testing.assert_array_equal(run.steps, [0, 1])
    assert (run.stats[0] == 1).all() and (run.stats[1] == 3).all()


def test_newer_format_is_refused_and_the_other_runs_read(tmp_path):
    write_run(tmp_path, "good", num_steps=3)
    w = _raw_writer(tmp_path / "future")
    value = _string_value(metadata.TAG_LAYERS, json.dumps({"layers": []}))
    value.metadata.plugin_data.content = json.dumps({"version": metadata.FORMAT_VERSION + 1}).encode()
    _add(w, 0, summary_pb2.Summary(value=[value]))
    w.close()
    notes = []
    with pytest.warns(NeuralDbgDataWarning, match="newer") as record:
        runs = read_logdir(tmp_path, notes)
    assert [r.name for r in runs] == ["good"]
    assert len(notes) == 1 and notes[0].startswith("run 'future', tag 'neuraldbg/layers'")
    assert "format version 2 is newer" in notes[0] and notes[0].endswith("run not read")
    assert [str(r.message) for r in record] == notes
    with pytest.raises(FormatError, match="newer"):
        read_run(tmp_path / "future")


@pytest.mark.slow
def test_a_large_run_reads_back_exactly(tmp_path):
    """2000 steps x 66 layers (its read time: benchmarks/untrusted_logdir.py
    times read_logdir, benchmarks/plugin_scale.py a run 20 times larger)."""
    layers = make_layers(64)
    with SyntheticWriter(tmp_path, "big", layers, keep_truth=False) as w:
        rows = np.random.default_rng(0).random((2000, len(layers), len(metadata.METRICS)), dtype=np.float32)
        for s in range(2000):
            w.step(s, rows[s])
    (run,) = read_logdir(tmp_path)
    np.testing.assert_array_equal(run.stats, rows)


def test_tensors_without_tensor_content_are_decoded(tmp_path):
    """Protos holding values in float_val/int_val (other writers) read the same."""
    layers = make_layers(1)
    n, m = len(layers), len(metadata.METRICS)
    row = np.arange(n * m, dtype=np.float32).reshape(n, m)
    summ = summary.stats_summary(row, np.arange(n, dtype=np.uint8))
    for value in summ.value:
        arr = tensor_util.make_ndarray(value.tensor)
        value.tensor.ClearField("tensor_content")
        if value.tag == metadata.TAG_STATES:
            value.tensor.int_val.extend(int(x) for x in arr)
        else:
            value.tensor.float_val.extend(float(x) for x in arr)
    w = _raw_writer(tmp_path / "vals")
    _add(w, 0, summary.layers_summary(layers))
    _add(w, 0, summ)
    w.close()
    (run,) = read_logdir(tmp_path)
    np.testing.assert_array_equal(run.stats[0], row)
    np.testing.assert_array_equal(run.states[0], np.arange(n))


def test_corrupt_record_is_skipped_and_named(tmp_path):
    """A flipped bit fails one record's data checksum: its length checksum
    holds, so the records after it are read; the run says what was lost."""
    write_run(tmp_path, "r", num_steps=10)
    (path,) = (tmp_path / "r").glob("events.out.tfevents.*")
    data = bytearray(path.read_bytes())
    data[len(data) * 2 // 3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.warns(NeuralDbgDataWarning, match="bad data checksum"):
        (run,) = read_logdir(tmp_path)
    assert run.incomplete and len(run.warnings) == 1
    assert run.warnings[0].startswith(f"{path.name}: skipped the record at offset ")
    assert 9 <= run.num_steps <= 10 and run.steps[-1] == 9


def test_fast_crc_matches_tensorboards():
    pytest.importorskip("google_crc32c")
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow as stub

    from tensorboard.summary.writer import record_writer

    from tb_neuraldbg.format.crc import FAST, masked_crc
    from tb_neuraldbg.reader import use_fast_crc

    assert FAST  # google-crc32c's C code is installed with the test extras

    rng = np.random.default_rng(1)
    for size in (0, 1, 7, 8, 1000, 7000):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        # TensorBoard's pure-Python CRC32C with the TFRecord mask.
        x = stub.u32(stub.crc32c(data))
        expected = stub.u32(((x >> 15) | stub.u32(x << 17)) + 0xA282EAD8)
        assert masked_crc(data) == expected
        assert masked_crc(bytearray(data)) == expected  # what the record writer may pass
    assert use_fast_crc() is True
    assert stub.masked_crc32c is masked_crc and record_writer.masked_crc32c is masked_crc
    assert use_fast_crc() is True  # idempotent


def test_reads_what_debugwriter_wrote_and_offline_matches_online(tmp_path):
    """End to end: a real DebugWriter run, read back; the offline replay of the
    stored rows gives the diagnosis the writer computed online (every step of
    a short run is stored, so both saw the same rows)."""
    torch = pytest.importorskip("torch")
    from torch import nn

    from tb_neuraldbg import DebugWriter, diagnose

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    crit = nn.CrossEntropyLoss()
    steps, bad_step = 40, 25
    with DebugWriter(str(tmp_path / "mlp")) as writer:
        writer.watch(model, optimizer=opt, criterion=crit)
        for step in range(steps):
            x = torch.randn(32, 8)
            if step == bad_step:
                x[3, 2] = float("nan")  # one bad sample: <input> goes non-finite
            opt.zero_grad()
            loss = crit(model(x), torch.randint(0, 4, (32,)))
            loss.backward()
            opt.step()
            writer.add_scalar("train/loss", loss.item(), step)
    (run,) = read_logdir(tmp_path)
    assert run.name == "mlp"
    np.testing.assert_array_equal(run.steps, np.arange(steps))
    assert run.layer_names[0] == metadata.PSEUDO_INPUT and run.layer_names[-1] == metadata.PSEUDO_OPTIMIZER
    assert {"0", "2"} <= {name.split(".")[-1] for name in run.layer_names}
    nonfinite = run.stats[:, 0, M["act_nonfinite"]]
    assert nonfinite[bad_step] > 0 and (nonfinite[:bad_step] == 0).all()
    assert run.config is not None
    # The planted bad batch is what the online diagnosis names.
    assert run.diagnosis["status"] == "failing"
    assert (run.diagnosis["root_cause"]["layer"], run.diagnosis["root_cause"]["step"]) == ("<input>", bad_step)

    (offline,) = diagnose(tmp_path)
    assert offline.status == run.diagnosis["status"]
    assert offline.root_cause == run.diagnosis["root_cause"]
    # The same events (the writer may add extra keys, e.g. where it saved a batch).
    keys = ("step", "layer", "kind", "from_state", "to_state", "severity", "message")
    def strip(events):
        return sorted(tuple(e.get(k) for k in keys) for e in events)
    assert strip(e.to_dict() for e in offline.events) == strip(run.events)
    # The engine's per-step states offline are the stored online states.
    np.testing.assert_array_equal(offline.states, run.states)


def test_absurd_tensor_shape_is_skipped_not_allocated(tmp_path):
    layers = make_layers(1)
    summ = summary.stats_summary(np.zeros((len(layers), len(metadata.METRICS)), np.float32))
    proto = summ.value[0].tensor
    proto.ClearField("tensor_content")
    proto.tensor_shape.dim[0].size = 10**12  # would be 4 TB if trusted
    proto.float_val.append(1.0)
    w = _raw_writer(tmp_path / "r")
    _add(w, 0, summary.layers_summary(layers))
    _add(w, 0, summ)
    w.close()
    with pytest.warns(NeuralDbgDataWarning, match="grad_norm record at step 0"):
        (run,) = read_logdir(tmp_path)
    assert run.stats.shape == (1, len(layers), len(metadata.METRICS))
    assert np.isnan(run.stats[0, :, M["grad_norm"]]).all()
