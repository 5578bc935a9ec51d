"""DebugWriter end to end: event files that TensorBoard reads, the write
schedule and ring around events, online diagnosis plumbing (events, flush,
on_error="raise", saved batches), closing paths, and the byte budget."""

import glob
import json
import os
import time

import numpy as np
import pytest
import torch
from tensorboard import context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.util import tensor_util
from torch import nn

import tb_neuraldbg.diagnosis as diagnosis
from tb_neuraldbg import DebugWriter, metadata
from tb_neuraldbg.diagnosis.events import Event
from tb_neuraldbg.format import binning
from tb_neuraldbg.format.blocks import BlockBuilder
from tb_neuraldbg.training.schedule import WatchConfig
from tb_neuraldbg.training.writer import TrainingFailure
from tests.device import DEVICE, to_device
from tests.faults import InfBackward

torch.set_num_threads(1)
M = metadata.METRIC_INDEX


# -- helpers ----------------------------------------------------------------


class PlannedEngine:
    """Stand-in for the diagnosis Engine (the interface of common.md): emits
    the events planned for given steps, records every update it gets."""

    plan: dict = {}
    at_finish: list = []
    last = None

    def __init__(self, layers, thresholds=None):
        self.layers = [dict(l) for l in layers]
        self.thresholds = thresholds
        self.states = np.zeros(len(self.layers), np.uint8)
        self.events = []
        self.root_cause = None
        self.updates = []
        PlannedEngine.last = self

    @property
    def status(self):
        return "failing" if any(e.severity == "error" for e in self.events) else "healthy"

    def add_layers(self, new):
        self.layers += [dict(l) for l in new]
        self.states = np.concatenate([self.states, np.zeros(len(new), np.uint8)])

    def update(self, step, row):
        assert row.shape == (len(self.layers), len(metadata.METRICS))
        self.updates.append(step)
        if step not in self.plan:
            return []
        onset, layer, kind, severity = self.plan[step]
        e = Event(onset, layer, kind, "healthy", "nonfinite", 1.0, severity, f"{layer}: {kind}")
        self.events.append(e)
        if severity == "error" and self.root_cause is None:
            self.root_cause = {"kind": kind, "layer": layer, "step": onset, "message": e.message}
        self.states[[l["name"] for l in self.layers].index(layer)] = metadata.STATE_CODE["nonfinite"]
        return [e]

    def finish(self):
        return [Event(s, layer, kind, "healthy", "frozen", None, sev, f"{layer}: {kind}") for s, layer, kind, sev in self.at_finish]


@pytest.fixture
def planned(monkeypatch):
    PlannedEngine.plan = {}
    PlannedEngine.at_finish = []
    monkeypatch.setattr(diagnosis, "Engine", PlannedEngine)
    return PlannedEngine


def tiny():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def fit(writer, model, steps, start=0, bad_step=None, **watch):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    crit = nn.CrossEntropyLoss()
    handle = writer.watch(model, optimizer=opt, criterion=crit, **watch)
    g = torch.Generator().manual_seed(0)
    batches = {}
    for step in range(start, start + steps):
        x = to_device(torch.randn(8, 4, generator=g, device="cpu"))
        y = to_device(torch.randint(0, 2, (8,), generator=g, device="cpu"))
        batches[step] = (x, y)
        opt.zero_grad()
        crit(model(x), y).backward()
        opt.step()
    return handle, batches


def load(logdir):
    ea = EventAccumulator(str(logdir), size_guidance={"tensors": 0, "histograms": 0, "scalars": 0})
    ea.Reload()
    return ea


def tensor_steps(ea, tag):
    return [e.step for e in ea.Tensors(tag)]


def json_values(ea, tag):
    return [json.loads(tensor_util.make_ndarray(e.tensor_proto).item()) for e in ea.Tensors(tag)]


# -- the event file ---------------------------------------------------------


def test_rows_layers_config_and_user_scalars_in_one_readable_file(tmp_path):
    model = tiny()
    with DebugWriter(str(tmp_path)) as w:
        handle, _ = fit(w, model, 12)
        w.add_scalar("user/loss", 1.0, 3)
        layers = handle.layers
    assert len(glob.glob(str(tmp_path / "events.out.tfevents.*"))) == 1
    ea = load(tmp_path)
    tags = ea.Tags()["tensors"]
    for metric in metadata.METRICS:
        assert tensor_steps(ea, metadata.stats_tag(metric)) == list(range(12))
    assert ea.Scalars("user/loss")[0].value == 1.0
    L = len(layers)
    gn = tensor_util.make_ndarray(ea.Tensors(metadata.stats_tag("grad_norm"))[5].tensor_proto)
    assert gn.dtype == np.float32 and gn.shape == (L,)
    assert gn[1] > 0 and np.isnan(gn[0])  # Linear has a gradient, <input> has none
    states = tensor_util.make_ndarray(ea.Tensors(metadata.TAG_STATES)[0].tensor_proto)
    assert states.dtype == np.uint8 and states.shape == (L,)
    assert json_values(ea, metadata.TAG_LAYERS) == [{"layers": layers}]
    assert [l["name"] for l in layers] == ["<input>", "0", "1", "2", "<loss>", "<optimizer>"]
    (config,) = json_values(ea, metadata.TAG_CONFIG)
    assert config["format_version"] == metadata.FORMAT_VERSION and config["stats_every"] == 10
    assert metadata.TAG_CONFIG in tags
    meta = ea.SummaryMetadata(metadata.stats_tag("act_std"))
    assert meta.plugin_data.plugin_name == metadata.PLUGIN_NAME
    assert metadata.parse_plugin_metadata(meta.plugin_data.content)["metric"] == "act_std"


def test_metadata_is_written_once_per_tag(tmp_path):
    with DebugWriter(str(tmp_path)) as w:
        fit(w, tiny(), 5)
    (path,) = glob.glob(str(tmp_path / "events.out.tfevents.*"))
    with_meta, values = {}, {}
    for event in EventFileLoader(path).Load():
        for v in event.summary.value:
            values[v.tag] = values.get(v.tag, 0) + 1
            with_meta[v.tag] = with_meta.get(v.tag, 0) + v.HasField("metadata")
    assert values[metadata.stats_tag("grad_norm")] == 5
    assert with_meta[metadata.stats_tag("grad_norm")] == 1
    assert with_meta[metadata.TAG_STATES] == 1


def test_histograms_and_plugin_visible_to_tensorboard(tmp_path):
    with DebugWriter(str(tmp_path)) as w:
        fit(w, tiny(), 3, hist_every=2)
    mux = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={metadata.PLUGIN_NAME: 0})
    mux.AddRunsFromDirectory(str(tmp_path))
    mux.Reload()
    provider = data_provider.MultiplexerDataProvider(mux, str(tmp_path))
    ctx = context.RequestContext()
    plugins = provider.list_plugins(ctx, experiment_id="")
    assert "histograms" in plugins and metadata.PLUGIN_NAME in plugins
    hists = provider.list_tensors(ctx, experiment_id="", plugin_name="histograms")
    (run,) = hists.values()
    tag = f"{metadata.PLUGIN_NAME}_hist/1/activation"
    assert tag in run and run[tag].max_step == 2
    # A step's histograms travel in one event (one Summary, a value per
    # module): TensorBoard still sees every module's series.
    for name in ("0", "1", "2"):
        assert run[metadata.hist_tag(name)].max_step == 2
    events = [e for f in glob.glob(str(tmp_path / "**" / "events.out.tfevents.*"), recursive=True)
              for e in EventFileLoader(f).Load()]
    with_hists = [e for e in events if any(v.tag.startswith(f"{metadata.PLUGIN_NAME}_hist/") for v in e.summary.value)]
    assert len(with_hists) == 2 and all(len(e.summary.value) == 3 for e in with_hists)
    data = provider.read_tensors(ctx, experiment_id="", plugin_name="histograms", downsample=100,
                                 run_tag_filter=None)
    (series,) = data.values()
    buckets = series[tag][0].numpy  # [k, 3]: left edge, right edge, count
    assert buckets[:, 2].sum() == 8 * 8  # every ReLU output value of the batch
    assert np.isfinite(buckets).all()


def test_record_without_optimizer(tmp_path):
    model = tiny()
    crit = nn.CrossEntropyLoss()
    with DebugWriter(str(tmp_path)) as w:
        w.watch(model)
        for step in (5, 6, 7):
            model.zero_grad()
            loss = crit(model(torch.randn(8, 4)), torch.randint(0, 2, (8,)))
            loss.backward()
            w.record(step, loss=loss)
    ea = load(tmp_path)
    assert tensor_steps(ea, metadata.stats_tag("value")) == [5, 6, 7]
    last = tensor_util.make_ndarray(ea.Tensors(metadata.stats_tag("value"))[-1].tensor_proto)
    assert last[-2] == pytest.approx(loss.item())  # <loss>, then <optimizer> (NaN)


# -- schedule, ring and events ----------------------------------------------


def test_write_schedule_with_full_resolution_around_an_event(tmp_path, planned):
    planned.plan = {90: (88, "2", "exploding_gradient", "warning")}
    cfg = dict(full_steps=20, stats_every=5, ring=4, hist_every=0)
    with DebugWriter(str(tmp_path)) as w:
        fit(w, tiny(), 130, **cfg)
    assert planned.last.updates == list(range(130))  # every step analysed
    written = tensor_steps(load(tmp_path), metadata.stats_tag("grad_norm"))
    schedule = WatchConfig(**cfg)
    around = set(range(86, 95))  # 4 before the event step (the ring), 4 after
    tail = set(range(126, 130))  # the ring at close
    expected = sorted({s for s in range(130) if schedule.is_written(s)} | around | tail)
    assert written == expected
    assert written == sorted(set(written))  # never backwards
    assert 21 not in written and 40 in written and 80 in written and 85 not in written


def test_block_summaries_cover_the_written_rows_and_close_at_events(tmp_path, planned):
    """Every written row is in exactly one block of at most BLOCK_ROWS rows,
    in order; a block ends where events are written and at close; each
    block's summary is its rows binned (format/blocks.py)."""
    planned.plan = {37: (35, "2", "exploding_gradient", "warning")}
    cfg = dict(full_steps=20, stats_every=5, ring=4, hist_every=0)
    with DebugWriter(str(tmp_path)) as w:
        fit(w, tiny(), 90, **cfg)
    ea = load(tmp_path)
    rows = {e.step: e for e in ea.Tensors(metadata.TAG_STATES)}
    written = sorted(rows)
    spans = [(e.step, tensor_util.make_ndarray(e.tensor_proto).tolist())
             for e in ea.Tensors(metadata.TAG_BLOCK_SPAN)]
    assert all(step == span[2] for step, span in spans)  # stored at the last step
    covered = []
    prev = -1
    for _, (before, first, last, n, _) in spans:
        inside = [s for s in written if first <= s <= last]
        assert before == prev and len(inside) == n <= metadata.BLOCK_ROWS
        assert inside[0] == first and inside[-1] == last
        covered += inside
        prev = last
    assert covered == written
    events_at = tensor_steps(ea, metadata.TAG_EVENTS)
    assert 37 in events_at and 37 in [span[2] for _, span in spans]  # closed before the event
    assert spans[-1][1][2] == written[-1] and spans[-1][1][4] == 1  # and at close, final
    assert [span[4] for _, span in spans[:-1]] == [0] * (len(spans) - 1)
    assert json_values(ea, metadata.TAG_CONFIG)[0]["blocks"] == metadata.BLOCK_ROWS
    stats = {m: {e.step: tensor_util.make_ndarray(e.tensor_proto) for e in ea.Tensors(metadata.stats_tag(m))}
             for m in metadata.METRICS}
    block_stats = {m: {e.step: tensor_util.make_ndarray(e.tensor_proto)
                       for e in ea.Tensors(metadata.block_stats_tag(m))} for m in metadata.METRICS}
    block_states = {e.step: tensor_util.make_ndarray(e.tensor_proto) for e in ea.Tensors(metadata.TAG_BLOCK_STATES)}
    assert any(metadata.STATE_CODE["nonfinite"] in s for s in block_states.values())  # the planted state
    for key, (_, first, last, _, _) in spans:
        inside = [s for s in written if first <= s <= last]
        block = np.stack([np.stack([stats[m][s] for m in metadata.METRICS], axis=1) for s in inside])
        codes = np.stack([tensor_util.make_ndarray(rows[s].tensor_proto) for s in inside])
        values, worst = binning.summarize(block, codes)
        np.testing.assert_array_equal(block_states[key], worst)
        for j, m in enumerate(metadata.METRICS):
            np.testing.assert_array_equal(block_stats[m][key], values[:, j], err_msg=m)


def test_a_loop_that_stops_without_close_gets_its_block_after_a_while(tmp_path, monkeypatch):
    """A notebook's loop ended, the writer left open: once the worker has
    had no step for IDLE_CLOSE_S, the open block is written and the file
    flushed, so the blocks cover every row on disk."""
    from tb_neuraldbg.training.worker import thread as worker_module

    monkeypatch.setattr(worker_module, "IDLE_CLOSE_S", 0.2)
    monkeypatch.setattr(worker_module, "IDLE_BLOCK_AGE_S", 0.0)
    w = DebugWriter(str(tmp_path))
    try:
        fit(w, tiny(), 40, ring=4, hist_every=0)  # rows 0-35 leave the ring: written
        w._worker.sync(10)
        deadline = time.monotonic() + 60
        while True:
            ea = load(tmp_path)
            spans = [tensor_util.make_ndarray(e.tensor_proto).tolist()
                     for e in ea.Tensors(metadata.TAG_BLOCK_SPAN)] if \
                metadata.TAG_BLOCK_SPAN in ea.Tags()["tensors"] else []
            if spans and spans[-1][2] == 35 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert tensor_steps(ea, metadata.TAG_STATES) == list(range(36))
        assert [s[1:4] for s in spans] == [[0, 7, 8], [8, 15, 8], [16, 23, 8], [24, 31, 8], [32, 35, 4]]
        assert spans[-1][4] == 0  # not the writer's last: it goes on
    finally:
        w.close()
    spans = [tensor_util.make_ndarray(e.tensor_proto).tolist() for e in load(tmp_path).Tensors(metadata.TAG_BLOCK_SPAN)]
    assert spans[-1][:4] == [35, 36, 39, 4] and spans[-1][4] == 1  # the ring's rows at close


def test_a_block_that_fails_costs_only_itself(tmp_path, monkeypatch):
    """A block summary that cannot be built is warned once; the rows are all
    written and the next block's span shows readers the gap."""
    from tb_neuraldbg.format import binning as binning_module

    real, calls = binning_module.summarize, []

    def flaky(rows, states):
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("planted")
        return real(rows, states)

    monkeypatch.setattr(binning_module, "summarize", flaky)
    with pytest.warns(RuntimeWarning, match="writer block failed: ValueError: planted"):
        with DebugWriter(str(tmp_path)) as w:
            fit(w, tiny(), 30, hist_every=0)
    ea = load(tmp_path)
    assert tensor_steps(ea, metadata.TAG_STATES) == list(range(30))
    spans = [tensor_util.make_ndarray(e.tensor_proto).tolist() for e in ea.Tensors(metadata.TAG_BLOCK_SPAN)]
    assert [s[1] for s in spans] == [0, 16, 24] and spans[1][0] == 15  # rows 8-15's block is missing


def test_events_are_written_flushed_and_raise_on_error(tmp_path, planned):
    planned.plan = {3: (2, "0", "nonfinite", "error")}
    model = tiny()
    w = DebugWriter(str(tmp_path))
    with pytest.raises(TrainingFailure) as info:
        fit(w, model, 200, on_error="raise")
    assert info.value.diagnosis["root_cause"]["layer"] == "0"
    assert info.value.events[0]["kind"] == "nonfinite"
    # Already on disk before close(): flushed right after the event.
    ea = load(tmp_path)
    (events,) = json_values(ea, metadata.TAG_EVENTS)
    assert events[0]["step"] == 2 and events[0]["layer"] == "0"
    assert tensor_steps(ea, metadata.TAG_EVENTS) == [3]
    diag = json_values(ea, metadata.TAG_DIAGNOSIS)
    assert diag[-1]["status"] == "failing" and diag[-1]["root_cause"]["step"] == 2
    w.close()


def test_offending_batch_is_saved_as_npz(tmp_path, planned):
    planned.plan = {6: (4, "<input>", "data_anomaly", "error")}
    with DebugWriter(str(tmp_path)) as w:
        _, batches = fit(w, tiny(), 8)
    (path,) = glob.glob(str(tmp_path / "neuraldbg_batch_step*.npz"))
    saved = np.load(path, allow_pickle=False)
    x, y = batches[int(path.rsplit("step", 1)[1].split(".")[0])]
    assert np.array_equal(saved["arg0"], x.cpu().numpy())
    assert np.array_equal(saved["target"], y.cpu().numpy())
    (events,) = json_values(load(tmp_path), metadata.TAG_EVENTS)
    assert events[0]["batch_file"] == os.path.basename(path)


def test_training_that_raises_still_writes_everything(tmp_path):
    model = tiny()
    with pytest.raises(KeyError):
        with DebugWriter(str(tmp_path)) as w:
            fit(w, model, 7)
            raise KeyError("loop crashed")
    assert tensor_steps(load(tmp_path), metadata.stats_tag("grad_norm")) == list(range(7))
    assert all(len(m._forward_hooks) == 0 for m in model.modules())


def test_watch_twice_is_a_noop_and_close_removes_hooks(tmp_path):
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    w = DebugWriter(str(tmp_path / "a"))
    h1 = w.watch(model, optimizer=opt)
    assert w.watch(model, optimizer=opt) is h1
    hooks = sum(len(m._forward_hooks) for m in model.modules())
    other = DebugWriter(str(tmp_path / "b"))
    with pytest.raises(ValueError, match="already watched"):
        other.watch(model)
    other.close()
    h1.remove()
    with pytest.raises(ValueError, match="new DebugWriter"):
        w.watch(model, optimizer=opt)  # one run per event file
    w.close()
    assert sum(len(m._forward_hooks) for m in model.modules()) == 0 < hooks
    assert len(opt._optimizer_step_post_hooks) == 0


def test_writer_works_without_a_diagnosis_engine(tmp_path, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("engine not ready")

    monkeypatch.setattr(diagnosis, "Engine", broken)
    with pytest.warns(RuntimeWarning, match="engine not ready"):
        with DebugWriter(str(tmp_path)) as w:
            fit(w, tiny(), 4)
    states = load(tmp_path).Tensors(metadata.TAG_STATES)
    assert len(states) == 4
    assert (tensor_util.make_ndarray(states[0].tensor_proto) == metadata.STATE_UNKNOWN).all()


def test_real_engine_gets_every_row(tmp_path):
    with DebugWriter(str(tmp_path)) as w:
        fit(w, tiny(), 3)
        w.flush()
        assert w.stats_info["steps_analysed"] == 3 and w.stats_info["engine"]
        assert w.stats_info["statistics"] == "torch"  # the back end that ran
        assert w._worker.engine.num_classes == 2  # from the CrossEntropyLoss logits


def test_stats_info_says_what_the_writer_costs_a_step(tmp_path, monkeypatch):
    import sys

    from tb_neuraldbg.training.hooks import step_facts
    from tb_neuraldbg.training.worker import thread as worker

    # The hooks' clock is a fake one that only the planted work moves, so that
    # the figures are exact whatever else the machine runs (the real costs:
    # benchmarks/overhead.py).
    clock = [0]
    # A part of the commit made 20 ms slower: it runs inside the commit's own
    # guarded hook body, and is counted once, not once per nested guard.
    commit = step_facts.StepFacts.commit

    def slow_commit(self, *args):
        clock[0] += 20_000_000
        return commit(self, *args)

    monkeypatch.setattr(step_facts.StepFacts, "commit", slow_commit)
    # ... and each step 10 ms more of the worker thread's CPU
    process = worker.Worker._process

    def busy_process(self, *args):
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.01:
            pass
        return process(self, *args)

    monkeypatch.setattr(worker.Worker, "_process", busy_process)
    with DebugWriter(str(tmp_path)) as w:
        fit(w, tiny(), 0)
        info = w.stats_info
        assert info["steps_recorded"] == 0
        assert info["hooks_ms_per_step"] is None and info["worker_ms_per_step"] is None
        assert info["step_ms"] is None and info["hooks_share"] is None and info["worker_share"] is None
        opt = w._handle.instrument.optimizer
        model = w._handle.instrument.model
        for part in (w._handle.instrument, w._handle.instrument.guard):  # (the step's clock, the hooks')
            monkeypatch.setattr(sys.modules[type(part).__module__], "perf_counter_ns", lambda: clock[0])
        crit = nn.CrossEntropyLoss()
        for _ in range(3 * worker.BURST):
            clock[0] += 30_000_000  # the loop's own work: 30 ms a step outside the hooks
            opt.zero_grad()
            crit(model(to_device(torch.randn(8, 4))), to_device(torch.randint(0, 2, (8,)))).backward()
            opt.step()
        w.flush()
        info = w.stats_info
    assert info["steps_recorded"] == 3 * worker.BURST
    assert info["hooks_ms_per_step"] == pytest.approx(20), info
    assert info["worker_ms_per_step"] >= 9.9, info
    assert info["steps_analysed"] == 3 * worker.BURST
    # a step: the 20 ms in the commit and the loop's 30 ms
    assert info["step_ms"] == pytest.approx(50), info
    # (each share over one span of time: test_writer_checks.py's test_the_shares_stay_within_0_and_1)
    assert info["hooks_share"] == pytest.approx(0.4), info
    assert 0 <= info["worker_share"] <= 1, info


# -- size ---------------------------------------------------------------------


def test_100k_steps_of_a_100_layer_model_fit_in_72_mb(tmp_path):
    """Bytes = (rows the default schedule writes for 100,000 steps) x (bytes of
    one written row, measured in a real event file) + histograms likewise."""
    cfg = WatchConfig()
    n_steps, L = 100_000, 103  # 100 modules and the three pseudo-layers
    rows = sum(cfg.is_written(s) for s in range(n_steps)) + cfg.ring  # + the ring at close
    hists = sum(cfg.is_hist(s) for s in range(n_steps))
    # Measure what one more row and one more histogram cost on disk.
    from torch.utils.tensorboard.summary import histogram_raw
    from tb_neuraldbg.training.worker.filewriter import SummaryFile
    from tb_neuraldbg.training.worker.thread import Worker

    class Fake:
        def __init__(self, d):
            self.fw = torch.utils.tensorboard.FileWriter(d)

        def file_writer(self):
            return self.fw

    fake = Fake(str(tmp_path))
    worker = Worker.__new__(Worker)
    worker.file = SummaryFile(fake.file_writer)
    worker.rows_written, worker.last_written, worker.silent = 0, -1, False
    worker.config = WatchConfig()  # the defaults' size: layer_scalars_every off (tests/test_layer_scalars.py)
    worker.blocks, worker.warned = BlockBuilder(), set()  # a block summary every 8 rows, counted in
    row = np.random.default_rng(0).random((L, len(metadata.METRICS)), dtype=np.float32)
    states = np.zeros(L, np.uint8)
    path = lambda: glob.glob(str(tmp_path / "events.out.tfevents.*"))[0]  # noqa: E731
    worker._write_row(0, row, states)
    fake.fw.flush()
    size0 = os.path.getsize(path())
    for s in range(1, 101):
        worker._write_row(s, row, states)
    fake.fw.flush()
    per_row = (os.path.getsize(path()) - size0) / 100
    counts = list(range(30))
    for s in range(100):
        h = histogram_raw("neuraldbg_hist/encoder.layers.10.linear1/activation", -1.0, 1.0, 4096.0,
                          1.0, 100.0, [float(i) for i in range(30)], counts)
        fake.fw.add_summary(h, s)
    fake.fw.flush()
    per_hist = (os.path.getsize(path()) - size0 - 100 * per_row) / 100
    fake.fw.close()
    total = rows * per_row + hists * (L - 3) * per_hist
    # no metadata after the first row, and a block summary (as wide) per BLOCK_ROWS rows
    assert per_row < (len(metadata.METRICS) + 2) * (4 * L + 64) * (1 + 1 / metadata.BLOCK_ROWS)
    print(f"budget: {rows} rows x {per_row:.0f} B + {hists} x {L - 3} histograms x {per_hist:.0f} B = {total / 2**20:.1f} MB")
    assert total < 72 * 2**20, f"{rows} rows x {per_row:.0f} B + {hists} histograms: {total / 2**20:.1f} MB"
    assert rows < n_steps / 10  # the stride does thin the run out


def test_a_module_first_seen_later_is_appended(tmp_path, planned):
    class Late(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 2)
            self.b = nn.Linear(4, 2)
            self.use_b = False

        def forward(self, x):
            return self.b(x) if self.use_b else self.a(x)

    model = Late()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    crit = nn.CrossEntropyLoss()
    with DebugWriter(str(tmp_path)) as w:
        handle = w.watch(model, optimizer=opt, criterion=crit)
        for step in range(4):
            model.use_b = step >= 2
            opt.zero_grad()
            crit(model(torch.randn(8, 4)), torch.randint(0, 2, (8,))).backward()
            opt.step()
    names = [l["name"] for l in handle.layers]
    assert names == ["<input>", "a", "<loss>", "<optimizer>", "b"]
    assert [l["name"] for l in planned.last.layers] == names  # the engine grew too
    ea = load(tmp_path)
    lists = json_values(ea, metadata.TAG_LAYERS)
    assert [len(x["layers"]) for x in lists] == [4, 5]
    assert tensor_steps(ea, metadata.TAG_LAYERS) == [0, 2]
    gn = [tensor_util.make_ndarray(e.tensor_proto) for e in ea.Tensors(metadata.stats_tag("grad_norm"))]
    assert [len(g) for g in gn] == [4, 4, 5, 5]
    assert gn[3][4] > 0 and np.isnan(gn[1][1]) is np.False_


def _late_module_run(logdir):
    """A model whose second branch first runs at step 13 (inside a burst of
    the worker), trained for 40 steps; (stats of every row, states, events)."""
    from tb_neuraldbg.offline.reader import read_logdir
    from tests.scenarios.harness import read_events

    class Late(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 8)
            self.act = nn.ReLU()
            self.b = nn.Linear(8, 2)
            self.c = nn.Linear(8, 2)

        def forward(self, x, late):
            h = self.act(self.a(x))
            return self.b(h) + (self.c(h) if late else 0.0)

    torch.manual_seed(0)
    model = Late()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    crit = nn.CrossEntropyLoss()
    with DebugWriter(logdir) as w:
        w.watch(model, optimizer=opt, criterion=crit)
        for step in range(40):
            opt.zero_grad()
            x = torch.randn(16, 4) * (1e30 if step == 30 else 1.0)  # a non-finite step: its replay
            crit(model(x, step >= 13), torch.randint(0, 2, (16,))).backward()
            opt.step()
    (run,) = read_logdir(logdir)
    return run.stats, run.states, read_events(logdir)


def test_a_burst_assembled_together_writes_what_one_step_at_a_time_writes(tmp_path, monkeypatch):
    from tb_neuraldbg.training.worker import thread as worker
    from tb_neuraldbg.training.step.rows import RowAssembler

    together = _late_module_run(str(tmp_path / "together"))
    calls = []
    real = RowAssembler.assembled
    monkeypatch.setattr(RowAssembler, "assembled", lambda self, *a: calls.append(len(a[0])) or real(self, *a))
    assert _late_module_run(str(tmp_path / "again")) is not None and max(calls) > 1  # bursts were assembled
    monkeypatch.setattr(worker, "BURST", 1)  # one packet at a time: no burst to assemble
    alone = _late_module_run(str(tmp_path / "alone"))

    def broken(self, *a):
        raise RuntimeError("boom")

    monkeypatch.setattr(worker, "BURST", 8)
    monkeypatch.setattr(RowAssembler, "assembled", broken)
    with pytest.warns(RuntimeWarning, match="writer burst failed: RuntimeError: boom"):
        fallback = _late_module_run(str(tmp_path / "fallback"))
    assert together[0].shape[:2] == (40, 7)  # <input>, a, act, b, <loss>, <optimizer>, then c
    assert np.isnan(together[0][:13, 6]).all() and np.isfinite(together[0][20:30, 6, metadata.METRIC_INDEX["grad_norm"]]).all()
    assert together[2][0], "the non-finite step gives events"
    for other in (alone, fallback):
        np.testing.assert_array_equal(together[0], other[0])
        np.testing.assert_array_equal(together[1], other[1])
        assert together[2] == other[2]


def test_interpreter_exit_flushes_everything(tmp_path):
    # What the atexit handler runs (a subprocess would cost seconds of import).
    from tb_neuraldbg.training.writer import _close_all_at_exit

    model = tiny()
    w = DebugWriter(str(tmp_path), flush_secs=3600)
    fit(w, model, 5)  # no close(): the ring still holds these rows
    _close_all_at_exit()
    assert tensor_steps(load(tmp_path), metadata.stats_tag("grad_norm")) == list(range(5))
    assert all(len(m._forward_hooks) == 0 for m in model.modules())


def test_thresholds_and_num_classes_reach_the_engine(tmp_path, planned):
    marker = object()
    with DebugWriter(str(tmp_path)) as w:
        fit(w, tiny(), 2, thresholds=marker)
    assert planned.last.thresholds is marker
    (config,) = json_values(load(tmp_path), metadata.TAG_CONFIG)
    assert config["num_classes"] == 2


def test_a_step_that_goes_backwards_is_analysed_not_written(tmp_path, planned):
    model = tiny()
    with pytest.warns(RuntimeWarning, match="step 3 is not after"):
        with DebugWriter(str(tmp_path)) as w:
            w.watch(model)
            for step in (5, 6, 3, 7):
                model.zero_grad()
                model(torch.randn(2, 4)).sum().backward()
                w.record(step)
    assert planned.last.updates == [5, 6, 3, 7]
    assert tensor_steps(load(tmp_path), metadata.stats_tag("grad_norm")) == [5, 6, 7]


@pytest.mark.parametrize("layers", [0, 1, 5, 300])
def test_fast_row_summary_equals_the_builder_without_metadata(layers):
    from tb_neuraldbg.format import summary
    from tb_neuraldbg.format.summary import row_summary_without_metadata

    rng = np.random.default_rng(layers)
    row = rng.standard_normal((layers, len(metadata.METRICS))).astype(np.float32)
    row[rng.random(row.shape) < 0.2] = np.nan
    row[rng.random(row.shape) < 0.05] = -np.inf
    states = rng.integers(0, 256, layers).astype(np.uint8)
    built = summary.stats_summary(row, states)
    fast = row_summary_without_metadata(row.astype(np.float64), states)
    # the same tags, in order, and the same arrays (make_tensor_proto writes
    # a single value as float_val, not as bytes)
    assert [v.tag for v in fast.value] == [v.tag for v in built.value]
    for a, b in zip(fast.value, built.value):
        assert not a.HasField("metadata")
        x, y = tensor_util.make_ndarray(a.tensor), tensor_util.make_ndarray(b.tensor)
        assert x.dtype == y.dtype and x.shape == y.shape == (layers,)
        np.testing.assert_array_equal(x, y)
    # the same protos as built a value at a time from the same bytes
    values = summary._raw_values(row, states, summary._STATS_TAGS, metadata.TAG_STATES)
    assert fast == summary.summary_pb2.Summary(value=values)
    assert summary._row_frame(layers) is not None  # (the fast path was taken)
    with pytest.raises(ValueError, match="states"):
        row_summary_without_metadata(row, states[:-1] if layers else np.zeros(1, np.uint8))


def test_a_row_summary_without_its_frame_is_built_a_value_at_a_time(monkeypatch):
    from tb_neuraldbg.format import summary

    row = np.arange(6 * len(metadata.METRICS), dtype=np.float32).reshape(6, -1)
    states = np.arange(6, dtype=np.uint8)
    fast = summary.row_summary_without_metadata(row, states)
    monkeypatch.setattr(summary, "_row_frame", lambda n: None)  # (a protobuf writing another order)
    assert summary.row_summary_without_metadata(row, states) == fast


def test_end_of_run_events_get_their_own_step(tmp_path, planned):
    planned.plan = {4: (3, "0", "exploding_gradient", "warning")}
    planned.at_finish = [(0, "2", "frozen_weights", "warning")]
    with DebugWriter(str(tmp_path)) as w:
        fit(w, tiny(), 5)
    ea = load(tmp_path)
    assert tensor_steps(ea, metadata.TAG_EVENTS) == [4, 5]  # 4 was taken by the step's events
    assert [e[0]["kind"] for e in json_values(ea, metadata.TAG_EVENTS)] == ["exploding_gradient", "frozen_weights"]


@pytest.mark.parametrize("mode", ["replay", "every_step"])
def test_a_nonfinite_output_gradient_is_written_and_counted(tmp_path, planned, mode):
    # Only the output gradient of the Tanh (before the bad backward) is
    # non-finite: no parameter upstream, activations finite; the inf goes
    # into the batch's own gradient. Steps 0-3 are full steps, whose output
    # gradient sums are checked too.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Tanh(), InfBackward(), nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    crit = nn.CrossEntropyLoss()
    with DebugWriter(str(tmp_path)) as w:
        w.watch(model, optimizer=opt, criterion=crit, nonfinite=mode)
        for _ in range(4):
            x = torch.randn(8, 4, requires_grad=True)
            opt.zero_grad()
            crit(model(x), torch.randint(0, 2, (8,))).backward()
            opt.step()
    ea = load(tmp_path)
    names = [l["name"] for l in json_values(ea, metadata.TAG_LAYERS)[-1]["layers"]]
    rows = [tensor_util.make_ndarray(e.tensor_proto) for e in ea.Tensors(metadata.stats_tag("gout_nonfinite"))]
    tanh, bad, lin = (names.index(n) for n in ("0", "1", "2"))
    # replay: exact counts at every step (each one re-run); every_step: the
    # flag at the first, then exact counts (decided on the training thread
    # at the step's end from its host copy, on CUDA one step later: the same
    # whatever the worker's lag).
    if mode == "replay":
        expected = [32, 32, 32, 32]
    else:
        expected = [1, 32, 32, 32] if DEVICE.type == "cpu" else [1, 1, 32, 32]
    assert [r[tanh] for r in rows] == expected
    assert all(r[bad] == 0 and r[lin] == 0 for r in rows)
    grads = [tensor_util.make_ndarray(e.tensor_proto) for e in ea.Tensors(metadata.stats_tag("grad_nonfinite"))]
    assert all(g[lin] == 0 for g in grads)


def test_num_classes_only_for_a_mean_reduced_cross_entropy(tmp_path, planned):
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    crit = nn.CrossEntropyLoss(reduction="sum")
    with DebugWriter(str(tmp_path)) as w:
        w.watch(model, optimizer=opt, criterion=crit)
        for _ in range(2):
            opt.zero_grad()
            crit(model(torch.randn(8, 4)), torch.randint(0, 2, (8,))).backward()
            opt.step()
    (config,) = json_values(load(tmp_path), metadata.TAG_CONFIG)
    assert config["num_classes"] is None


def test_record_after_close_is_ignored_not_raised(tmp_path):
    model = tiny()
    w = DebugWriter(str(tmp_path))
    w.watch(model)
    model(torch.randn(4, 4)).sum().backward()
    w.record(loss=1.0)
    w.close()
    model(torch.randn(4, 4)).sum().backward()
    with pytest.warns(RuntimeWarning, match="ignored"):
        w.record(loss=1.0)  # a loop that goes on after close() must not crash
    w.record()


def test_a_writer_kept_after_close_does_not_keep_the_model_alive(tmp_path):
    import gc
    import weakref

    model = tiny()
    w = DebugWriter(str(tmp_path))
    handle, _ = fit(w, model, 3)
    ref = weakref.ref(model)
    opt_ref = weakref.ref(handle.instrument.optimizer)
    w.close()
    del model
    gc.collect()
    assert ref() is None and opt_ref() is None
    assert handle.layers  # the row list stays readable


def test_a_hung_worker_does_not_hang_close(tmp_path, monkeypatch):
    import threading

    import tb_neuraldbg.training.writer as writer_mod

    monkeypatch.setattr(writer_mod, "_CLOSE_TIMEOUT", 0.5)
    release = threading.Event()
    model = tiny()
    w = DebugWriter(str(tmp_path))
    w.watch(model)
    monkeypatch.setattr(w._worker, "_process", lambda packet, *assembled: release.wait(120))
    model(torch.randn(4, 4)).sum().backward()
    w.record()
    worker = w._worker
    try:
        with pytest.warns(RuntimeWarning, match="did not finish"):
            w.close()
        assert worker.thread.is_alive()  # close gave up on it: it still waits for its release
        assert sum(len(m._forward_hooks) for m in model.modules()) == 0
    finally:
        release.set()


def test_record_with_a_loss_that_is_no_number_raises_and_monitoring_goes_on(tmp_path):
    model = tiny()
    w = DebugWriter(str(tmp_path))
    w.watch(model)
    for loss in (np.float32(1.5), np.array([1.0, 3.0]), [2.0, 4.0]):
        model(torch.randn(4, 4)).sum().backward()
        w.record(loss=loss)
    model(torch.randn(4, 4)).sum().backward()
    for odd in ("abc", {"a": 1}):
        with pytest.raises(TypeError, match="record\\(loss=...\\) takes a tensor"):
            w.record(loss=odd)
    w.record(loss=5.0)  # the same step, recorded once its loss is one
    w.close()
    assert w.stats_info["steps_analysed"] == 4
    from tb_neuraldbg.offline.reader import read_logdir

    (run,) = read_logdir(str(tmp_path))
    loss = run.stats[:, run.layer_names.index("<loss>"), run.metrics.index("value")]
    assert loss[-1] == 5.0 and "loss" not in w._handle.instrument.guard.broken  # still measured


# -- one declaration of the settings, one owner per job -------------------------


def test_watch_settings_are_declared_once_in_watchconfig(tmp_path):
    import dataclasses
    import inspect

    fields = {f.name: f.default for f in dataclasses.fields(WatchConfig)}
    params = inspect.signature(DebugWriter.watch).parameters
    knobs = {n: p.default for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert knobs == fields  # same names, same defaults
    doc = inspect.getdoc(DebugWriter.watch)
    assert all(f"\n{name}" in doc or f" {name}" in doc for name in fields)
    assert "\nstats_every: full activation statistics" in doc  # WatchConfig's own words, unindented

    with DebugWriter(str(tmp_path)) as w:
        fit(w, tiny(), 2, stats_every=3, include=[nn.Linear, "2"], on_error="raise")
    (config,) = json_values(load(tmp_path), metadata.TAG_CONFIG)
    assert set(fields) <= set(config)
    assert config["stats_every"] == 3 and config["include"] == ["Linear", "2"] and config["on_error"] == "raise"
    assert config["optimizer"] == "SGD" and config["scaler"] is False and config["num_classes"] == 2
    assert config["thresholds"] is None and config["format_version"] == metadata.FORMAT_VERSION
    assert {"tb_neuraldbg", "torch"} <= set(config)


def test_the_worker_starts_its_thread_in_start_not_in_its_constructor(tmp_path):
    import queue
    import threading

    from tb_neuraldbg.training.hooks.instrument import Instrument
    from tb_neuraldbg.training.worker.thread import TrainingSink, Worker

    before = threading.active_count()
    packets = queue.SimpleQueue()
    config = WatchConfig()
    inst = Instrument(tiny(), packets.put, config)
    worker = Worker(TrainingSink(None, inst, config, TrainingFailure), config, packets)
    assert worker.thread is None and threading.active_count() == before
    assert worker.sync(1.0) is False and worker.stop(1.0) is True  # nothing to wait for
    worker.start()
    assert worker.thread.is_alive() and threading.active_count() == before + 1
    assert worker.sync(60) is True
    inst.remove()


def _wait_for(cond, timeout=30.0):
    import time

    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    return cond()


def test_the_worker_analyses_packets_in_bursts_and_never_holds_them_long(monkeypatch):
    """Packets are analysed back to back, BURST at a time (the worker's
    data stays in the caches), in order; a marker (flush, close) or a pause
    in training analyses what came; with few batches held (large ones) the
    bursts are shorter, so that an event's batch is still held."""
    import queue
    import time

    from tb_neuraldbg.training.worker import thread as W
    from tb_neuraldbg.training.step.collector import StepPacket
    from tb_neuraldbg.training.hooks.instrument import Instrument

    monkeypatch.setattr(W, "BURST_WAIT_S", 60.0)
    packets = queue.SimpleQueue()
    config = WatchConfig()
    inst = Instrument(tiny(), packets.put, config)
    worker = W.Worker(W.TrainingSink(None, inst, config, TrainingFailure), config, packets)
    done = []
    monkeypatch.setattr(worker, "_process", lambda packet, *assembled: done.append(packet.step))
    monkeypatch.setattr(worker, "_finish", lambda: None)  # (no writer here to finish)

    def packet(step):
        return StepPacket(step=step, rows=np.zeros(0, np.int64), keys=np.zeros(0, np.int64), layers=[], stats=False)

    for step in range(20):
        inst.batches.keep(step, (torch.zeros(4),), {})  # many small batches held: full bursts
    worker.start()
    try:
        for step in range(W.BURST + 3):
            packets.put(packet(step))
        assert _wait_for(lambda: len(done) >= W.BURST)
        time.sleep(0.2)
        assert done == list(range(W.BURST))  # the last 3 wait for their burst...
        assert worker.sync(60) and done == list(range(W.BURST + 3))  # ...or a marker
        monkeypatch.setattr(W, "BURST_WAIT_S", 0.05)
        packets.put(packet(100))  # (the wait of the burst it opens is read at its next get)
        packets.put(packet(101))
        assert _wait_for(lambda: done[-2:] == [100, 101])  # a pause in training: analysed soon
        inst.batches.clear()
        for step in range(3):
            inst.batches.keep(step, (torch.zeros(4),), {})  # 3 held: one packet at a time
        monkeypatch.setattr(W, "BURST_WAIT_S", 60.0)
        packets.put(packet(200))
        assert _wait_for(lambda: done[-1] == 200)  # (not BURST_WAIT_S, 60 s, later)
        config.save_batches = False  # no batch to keep: full bursts whatever is held
        for step in range(300, 300 + W.BURST - 1):
            packets.put(packet(step))
        time.sleep(0.2)
        assert done[-1] == 200
        packets.put(packet(300 + W.BURST - 1))
        assert _wait_for(lambda: done[-1] == 300 + W.BURST - 1)
    finally:
        worker.stop(5.0)
        inst.remove()


def test_one_loop_drives_a_worker_with_the_waits_it_asks_for():
    """drive() takes items from get(timeout=...) (raising queue.Empty after
    that long, as a queue does) and leaves every rule to the worker: each
    feed/idle/analyse says how long to wait next."""
    import queue

    from tb_neuraldbg.training.worker import thread as W
    from tb_neuraldbg.training.step.collector import StepPacket

    calls, waits, acked = [], [], []

    class Worker:
        def feed(self, packet):
            calls.append(packet.step)
            return 0.5

        def idle(self):
            calls.append("idle")

        def analyse(self):
            calls.append("analyse")
            return 7.0

        def finish(self):
            calls.append("finish")

    marker = object()
    items = [StepPacket(step=s, rows=np.zeros(0, np.int64), keys=np.zeros(0, np.int64), layers=[], stats=False)
             for s in (0, 1)] + [queue.Empty, marker, W.STOP, "never read"]

    def get(timeout=None):
        waits.append(timeout)
        item = items.pop(0)
        if item is queue.Empty:
            raise queue.Empty
        return item

    W.drive(Worker(), get, acked.append)
    assert calls == [0, 1, "idle", "analyse", "finish"] and acked == [marker]
    assert waits == [None, 0.5, 0.5, None, 7.0] and items == ["never read"]


def test_kept_batches_and_saved_files_share_one_budget(monkeypatch, tmp_path):
    from tb_neuraldbg.training import batches as B

    monkeypatch.setattr(B, "BUDGET_BYTES", 1000)
    keeper = B.BatchKeeper()
    for step in range(5):
        keeper.keep(step, (torch.zeros(100),), {})  # 400 bytes each
    assert [keeper.batch_for(s)[0] if keeper.batch_for(s) else None for s in range(5)] == [None, None, None, 3, 4]
    keeper.keep(5, (torch.zeros(10_000),), {})  # alone over budget: still kept, with one before it
    assert keeper.batch_for(5)[0] == 5 and keeper.batch_for(4)[0] == 4
    keeper.attach_target(5, torch.arange(3))

    class Ev:
        kind, step = "data_anomaly", 5

    path = keeper.save_for(Ev(), str(tmp_path))
    saved = np.load(path, allow_pickle=False)
    assert saved["arg0"].nbytes <= 1000 and saved["arg0"].shape == (250,)  # cut to the budget
    assert "target" not in saved  # the budget was spent
