"""The plugin's HTTP routes through TensorBoard's real WSGI app.

TensorBoard's own test style: synthetic event files -> EventMultiplexer ->
MultiplexerDataProvider -> TBContext -> application.TensorBoardWSGI ->
werkzeug test Client. Expected values come from the ground truth that
tests/synthetic.py returns, never from the code under test.
"""

import base64
import gzip
import json
import os

import numpy as np
import pytest
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_provider as tb_data_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins import base_plugin
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util
from werkzeug import test as werkzeug_test

from tests.synthetic import Plant, SyntheticWriter, event, make_layers, write_run
from tb_neuraldbg import metadata
from tb_neuraldbg.format import contract as report
from tb_neuraldbg.server import plugin

BASE = "/data/plugin/neuraldbg"
M = metadata.METRIC_INDEX
NAN = float("nan")


def decode(x):
    """JSON value with TensorBoard's non-finite strings turned back into floats."""
    if isinstance(x, list):
        return [decode(v) for v in x]
    if isinstance(x, dict):
        return {k: decode(v) for k, v in x.items()}
    return {"NaN": NAN, "Infinity": float("inf"), "-Infinity": float("-inf")}.get(x, x) \
        if isinstance(x, str) else x


def f32(values):
    return np.array(decode(values), dtype=np.float64).astype(np.float32)


class CountingProvider:
    """Wraps a data provider and counts read_tensors calls."""

    def __init__(self, inner):
        self._inner = inner
        self.reads = 0

    def read_tensors(self, *args, **kwargs):
        self.reads += 1
        return self._inner.read_tensors(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class App:
    """A TensorBoard WSGI app serving the plugin over a logdir."""

    def __init__(self, logdir, sampling=0):
        self.logdir = str(logdir)
        self.mux = plugin_event_multiplexer.EventMultiplexer(
            tensor_size_guidance={metadata.PLUGIN_NAME: 0}
        )
        self.mux.AddRunsFromDirectory(self.logdir)
        self.mux.Reload()
        self.provider = CountingProvider(
            tb_data_provider.MultiplexerDataProvider(self.mux, self.logdir)
        )
        ctx = base_plugin.TBContext(
            logdir=self.logdir,
            data_provider=self.provider,
            multiplexer=self.mux,
            sampling_hints={metadata.PLUGIN_NAME: sampling},
        )
        self.plugin = plugin.NeuralDbgLoader().load(ctx)
        wsgi = application.TensorBoardWSGI([self.plugin], data_provider=self.provider)
        self.client = werkzeug_test.Client(wsgi)

    def reload(self):
        self.mux.AddRunsFromDirectory(self.logdir)
        self.mux.Reload()

    def get(self, path, status=200):
        r = self.client.get(path)
        assert r.status_code == status, (path, r.status_code, r.get_data(as_text=True))
        return r

    def json(self, path):
        r = self.get(path)
        assert r.headers["Content-Type"] == "application/json"
        return json.loads(r.get_data(as_text=True))


FAIL_EVENTS = [
    event(17, "fc2", "exploding_gradient", value=5e6, value_before=0.01),
    event(22, "fc1", "nonfinite", value=None),
    event(3, "<loss>", "initial_loss", value=9.5),
]
GROWN = {"name": "head.extra", "type": "Linear"}


@pytest.fixture(scope="module")
def logdir_and_truth(tmp_path_factory):
    root = tmp_path_factory.mktemp("logdir")
    truth = {}
    truth["healthy"] = write_run(root, "healthy", num_modules=3, num_steps=12, seed=1)
    truth["failing"] = write_run(
        root,
        "failing",
        num_modules=4,
        num_steps=40,
        first_step=100,
        stride=2,
        plants=[
            Plant(134, "fc2", "exploding", {"grad_norm": 5e6}),
            Plant(144, "fc1", "nonfinite", {"grad_norm": NAN, "act_absmax": float("inf")},
                  until=150),
        ],
        events=[dict(e, step=100 + 2 * e["step"]) for e in FAIL_EVENTS],
        confirm_delay=4,
        grow={120: [GROWN]},
        seed=2,
    )
    # A run with only ordinary scalars: no neuraldbg data.
    w = EventFileWriter(os.path.join(root, "scalars_only"))
    w.add_event(event_pb2.Event(step=0, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag="loss", simple_value=1.0)])))
    w.close()
    return root, truth


@pytest.fixture(scope="module")
def app(logdir_and_truth):
    return App(logdir_and_truth[0])


@pytest.fixture(scope="module")
def truth(logdir_and_truth):
    return logdir_and_truth[1]


def test_plugins_listing(app):
    listing = app.json("/data/plugins_listing")
    entry = listing[metadata.PLUGIN_NAME]
    assert entry["enabled"] is True
    assert entry["tab_name"] == "NeuralDbg"
    assert entry["loading_mechanism"] == {"type": "IFRAME", "module_path": f"{BASE}/index.js"}


def test_runs(app, truth):
    t = truth["failing"]
    err = [e for e in t.events if e["severity"] in ("warning", "error")]
    first = min(err, key=lambda e: e["step"])
    assert app.json(f"{BASE}/runs") == {
        "runs": [
            {
                "run": "failing",
                "status": "failing",
                "root_cause": {k: first[k] for k in ("kind", "layer", "step", "message")},
                "num_layers": len(t.layers),
                "first_step": 100,
                "last_step": 178,
                "num_steps": 40,
                "num_events": 3,
            },
            {
                "run": "healthy",
                "status": "healthy",
                "root_cause": None,
                "num_layers": 6,
                "first_step": 0,
                "last_step": 11,
                "num_steps": 12,
                "num_events": 0,
            },
        ],
        "skipped": [],
    }


def test_meta(app, truth):
    got = app.json(f"{BASE}/meta?run=failing")
    assert got == {
        "run": "failing",
        "layers": make_layers(4) + [GROWN],
        "metrics": list(metadata.METRICS),
        "states": [
            {"code": s.code, "name": s.name, "severity": s.severity, "rank": s.rank, "kind": s.kind,
             "evidence": s.evidence, "color": s.color, "label": s.label}
            for s in metadata.STATE_TABLE
        ],
        "metric_info": [
            {"name": m.name, "scale": m.scale, "label": m.label, "description": m.description}
            for m in metadata.METRIC_TABLE
        ],
        "colors": {"no_data": metadata.NO_DATA_COLOR, "unknown_state": metadata.UNKNOWN_STATE_COLOR},
        "first_step": 100,
        "last_step": 178,
        "num_steps": 40,
        "warnings": [],
    }
    assert truth["failing"].layers == got["layers"]


def test_heatmap_full_resolution_is_the_data(app, truth):
    t = truth["failing"]
    got = app.json(f"{BASE}/heatmap?run=failing&metric=grad_norm&max_cols=5000")
    assert got["run"] == "failing" and got["metric"] == "grad_norm"
    rows = len(t.layers)
    assert (got["rows"], got["cols"]) == (8, 40) == (rows, len(t.steps))
    assert got["layers"] == [l["name"] for l in t.layers]
    assert got["col_start"] == got["col_end"] == t.steps.tolist()
    values = f32(got["values"]).reshape(rows, 40)
    np.testing.assert_array_equal(values, t.stats[:, :, M["grad_norm"]].T)
    states = np.array(got["states"]).reshape(rows, 40)
    # The rows' states, and from its event's onset (step 106) the state that
    # only the event carries: <loss>'s initial_loss (no row holds it).
    expected = t.states.T.copy()
    expected[t.row("<loss>"), t.steps >= 106] = metadata.STATE_CODE["initial_loss"]
    np.testing.assert_array_equal(states, expected)
    # The layer born at step 120 has no data before it.
    born = t.steps.tolist().index(120)
    late = t.row(GROWN["name"])
    assert (states[late, :born] == metadata.STATE_UNKNOWN).all()
    assert np.isnan(values[late, :born]).all() and np.isfinite(values[late, born:]).all()


def test_heatmap_lone_failing_step_survives_binning(app, truth):
    got = decode(app.json(f"{BASE}/heatmap?run=failing&metric=grad_norm&max_cols=1"))
    row = truth["failing"].row("fc2")
    assert got["cols"] == 1 and got["col_start"] == [100] and got["col_end"] == [178]
    assert got["states"][row] == metadata.STATE_CODE["exploding"]
    assert got["values"][row] == pytest.approx(5e6)
    # fc1 is nonfinite for 4 steps: the worst state wins, with its NaN value.
    fc1 = truth["failing"].row("fc1")
    assert got["states"][fc1] == metadata.STATE_CODE["nonfinite"]
    assert np.isnan(got["values"][fc1])


def test_heatmap_range_and_infinities(app, truth):
    t = truth["failing"]
    got = app.json(f"{BASE}/heatmap?run=failing&metric=act_absmax&start=143&end=151&max_cols=2")
    # Logged steps 144..150 (even): 4 steps in 2 bins.
    assert got["col_start"] == [144, 148] and got["col_end"] == [146, 150]
    values = decode(got["values"])
    fc1 = t.row("fc1")
    assert values[fc1 * 2: fc1 * 2 + 2] == [float("inf"), float("inf")]
    assert got["states"][fc1 * 2: fc1 * 2 + 2] == [metadata.STATE_CODE["nonfinite"]] * 2


def test_heatmap_state_metric_and_b64_format(app, truth):
    t = truth["failing"]
    j = app.json(f"{BASE}/heatmap?run=failing&metric=state&max_cols=7")
    b = app.json(f"{BASE}/heatmap?run=failing&metric=state&max_cols=7&format=b64")
    assert "values" not in b and "states" not in b
    vb = np.frombuffer(base64.b64decode(b["values_b64"]), dtype="<f4")
    sb = np.frombuffer(base64.b64decode(b["states_b64"]), dtype=np.uint8)
    np.testing.assert_array_equal(vb, f32(j["values"]))
    np.testing.assert_array_equal(sb, j["states"])
    assert j["values"] == [float(s) for s in j["states"]]
    assert j["cols"] == 7 and len(j["states"]) == 7 * len(t.layers)
    for key in ("run", "metric", "rows", "cols", "layers", "col_start", "col_end"):
        assert j[key] == b[key]


def test_heatmap_answer_size_is_bounded(app, monkeypatch):
    monkeypatch.setattr(plugin, "MAX_CELLS", 8 * 3 + 2)
    got = app.json(f"{BASE}/heatmap?run=failing&metric=grad_norm&max_cols=5000")
    assert got["cols"] == 3 and len(got["values"]) == 24


def test_heatmap_empty_range(app):
    got = app.json(f"{BASE}/heatmap?run=healthy&metric=grad_norm&start=500&end=600")
    assert got["cols"] == 0 and got["values"] == [] and got["col_start"] == []


def contract(events):
    return report.run_report("x", None, events)["events"]


def test_events_all_sorted_by_step(app, truth):
    got = app.json(f"{BASE}/events?run=failing")
    want = contract(truth["failing"].events)
    assert [e["step"] for e in want] == [106, 134, 144]
    assert got == {"run": "failing", "total": 3, "offset": 0, "truncated": False, "events": want}


@pytest.mark.parametrize(
    "query, steps",
    [
        ("kind=nonfinite", [144]),
        ("kind=nonfinite&kind=initial_loss", [106, 144]),
        ("layer=fc2", [134]),
        ("layer=fc2&layer=%3Closs%3E", [106, 134]),
        ("layer=nope", []),
        ("severity=warning", [106]),
        ("severity=error", [134, 144]),
        ("start=107&end=144", [134, 144]),
        ("start=144", [144]),
        ("end=133", [106]),
        ("severity=error&layer=fc1", [144]),
    ],
)
def test_events_filters(app, query, steps):
    got = app.json(f"{BASE}/events?run=failing&{query}")
    assert [e["step"] for e in got["events"]] == steps
    assert got["total"] == len(steps) and got["truncated"] is False


def test_events_limit(app):
    got = app.json(f"{BASE}/events?run=failing&limit=2")
    assert got["total"] == 3 and got["truncated"] is True
    assert [e["step"] for e in got["events"]] == [106, 134]
    # The next page, and a page past the end.
    got = app.json(f"{BASE}/events?run=failing&limit=2&offset=2")
    assert (got["total"], got["offset"], got["truncated"]) == (3, 2, False)
    assert [e["step"] for e in got["events"]] == [144]
    assert app.json(f"{BASE}/events?run=failing&offset=9")["events"] == []


def test_layer_detail(app, truth):
    t = truth["failing"]
    got = app.json(f"{BASE}/layer?run=failing&layer=fc1&start=140&end=152")
    idx = [i for i, s in enumerate(t.steps) if 140 <= s <= 152]
    row = t.row("fc1")
    assert got["run"] == "failing" and got["layer"] == "fc1" and got["type"] == "Linear"
    assert got["steps"] == t.steps[idx].tolist()
    assert set(got["metrics"]) == set(metadata.METRICS)
    for m, values in got["metrics"].items():
        np.testing.assert_array_equal(f32(values), t.stats[idx, row, M[m]], err_msg=m)
    assert got["states"] == t.states[idx, row].tolist()
    assert got["events"] == [e for e in contract(t.events) if e["layer"] == "fc1"]


def test_layer_born_late_and_pseudo_layer(app, truth):
    t = truth["failing"]
    got = app.json(f"{BASE}/layer?run=failing&layer=head.extra")
    born = t.steps.tolist().index(120)
    assert got["states"][:born] == [metadata.STATE_UNKNOWN] * born
    assert np.isnan(f32(got["metrics"]["grad_norm"][:born])).all()
    loss = app.json(f"{BASE}/layer?run=failing&layer=%3Closs%3E")
    np.testing.assert_array_equal(f32(loss["metrics"]["value"]),
                                  t.stats[:, t.row("<loss>"), M["value"]])
    assert [e["kind"] for e in loss["events"]] == ["initial_loss"]


def test_layer_range_limit(app, monkeypatch):
    monkeypatch.setattr(plugin, "MAX_LAYER_POINTS", 10)
    r = app.get(f"{BASE}/layer?run=failing&layer=fc1", status=400)
    assert "narrow the range" in r.get_data(as_text=True)
    app.get(f"{BASE}/layer?run=failing&layer=fc1&start=100&end=118")  # 10 steps: fine


def test_report_matches_report_module(app, truth):
    got = app.json(f"{BASE}/report")
    want = {"runs": [
        report.run_report(name, truth[name].diagnosis, truth[name].events)
        for name in ("failing", "healthy")
    ]}
    assert got == want
    assert got["runs"][0]["status"] == "failing"


def test_index_js_serves_the_bundle(app, tmp_path, monkeypatch):
    bundle = tmp_path / "index.js"
    bundle.write_text("export function render() { /* built */ }\n")
    monkeypatch.setattr(plugin, "_BUNDLE", str(bundle))
    r = app.get(f"{BASE}/index.js")
    assert r.headers["Content-Type"].startswith("text/javascript")
    assert r.get_data(as_text=True) == bundle.read_text()


def test_index_js_without_bundle_explains(app, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(plugin, "_BUNDLE", str(tmp_path / "missing.js"))
    monkeypatch.setattr(app.plugin, "_warned_bundle", False)
    r = app.get(f"{BASE}/index.js")
    text = r.get_data(as_text=True)
    assert r.headers["Content-Type"].startswith("text/javascript")
    assert "export function render()" in text and "frontend bundle not built" in text
    assert plugin.BUILD_HINT in text
    assert any("missing" in rec.getMessage() for rec in caplog.records)


@pytest.mark.parametrize(
    "path, status, message",
    [
        ("meta", 400, "missing required parameter 'run'"),
        ("meta?run=nope", 404, "no neuraldbg data for run 'nope'"),
        ("meta?run=scalars_only", 404, "no neuraldbg data"),
        ("heatmap?run=failing", 400, "missing required parameter 'metric'"),
        ("heatmap?metric=state", 400, "missing required parameter 'run'"),
        ("heatmap?run=nope&metric=state", 404, "no neuraldbg data"),
        ("heatmap?run=failing&metric=bogus", 404, "unknown metric 'bogus'"),
        ("heatmap?run=failing&metric=state&start=-1", 400, "start must be in"),
        ("heatmap?run=failing&metric=state&start=9&end=3", 400, "start (9) must be <= end (3)"),
        ("heatmap?run=failing&metric=state&end=99999999999999999999", 400, "end must be in"),
        ("heatmap?run=failing&metric=state&start=1e3", 400, "start must be an integer"),
        ("heatmap?run=failing&metric=state&max_cols=0", 400, "max_cols must be in [1, 5000]"),
        ("heatmap?run=failing&metric=state&max_cols=5001", 400, "max_cols must be in"),
        ("heatmap?run=failing&metric=state&max_cols=" + "9" * 5000, 400, "max_cols must be an"),
        ("heatmap?run=failing&metric=state&format=png", 400, "format must be one of"),
        ("events", 400, "missing required parameter 'run'"),
        ("events?run=nope", 404, "no neuraldbg data"),
        ("events?run=failing&kind=bogus", 400, "unknown kind 'bogus'"),
        ("events?run=failing&severity=fatal", 400, "unknown severity 'fatal'"),
        ("events?run=failing&limit=0", 400, "limit must be in [1, 10000]"),
        ("events?run=failing&limit=10001", 400, "limit must be in"),
        ("events?run=failing&end=-5", 400, "end must be in"),
        ("layer?run=failing", 400, "missing required parameter 'layer'"),
        ("layer?run=failing&layer=nope", 404, "unknown layer 'nope'"),
        ("layer?run=nope&layer=fc1", 404, "no neuraldbg data"),
        ("layer?run=failing&layer=fc1&start=5&end=4", 400, "must be <= end"),
    ],
)
def test_bad_requests_get_clear_4xx(app, path, status, message):
    r = app.get(f"{BASE}/{path}", status=status)
    assert r.headers["Content-Type"].startswith("text/plain")
    assert message in r.get_data(as_text=True)


def test_repeated_zooms_do_not_reread(app):
    app.json(f"{BASE}/heatmap?run=healthy&metric=act_std")
    before = app.provider.reads
    for start, end in ((0, 5), (2, 9), (0, 11)):
        app.json(f"{BASE}/heatmap?run=healthy&metric=act_std&start={start}&end={end}")
    assert app.provider.reads == before
    app.json(f"{BASE}/heatmap?run=healthy&metric=act_mean")
    assert app.provider.reads == before + 1  # a new metric is one read


def test_run_still_being_written_shows_new_steps(tmp_path):
    w = SyntheticWriter(tmp_path, "live", make_layers(2), seed=3)
    for s in range(5):
        w.step(s)
    w.flush()
    a = App(tmp_path)
    got = a.json(f"{BASE}/heatmap?run=live&metric=grad_norm")
    assert got["col_end"][-1] == 4 and a.json(f"{BASE}/events?run=live")["total"] == 0
    w.grow([{"name": "late", "type": "Conv2d"}])
    for s in range(5, 9):
        w.step(s, events=[event(s, "late", "dead_activation")] if s == 7 else ())
    w.flush()
    a.reload()
    got = a.json(f"{BASE}/heatmap?run=live&metric=grad_norm")
    assert got["col_end"][-1] == 8 and got["rows"] == 6 and got["layers"][-1] == "late"
    assert a.json(f"{BASE}/events?run=live")["total"] == 1
    runs = a.json(f"{BASE}/runs")["runs"]
    assert runs[0]["last_step"] == 8 and runs[0]["status"] == "failing"  # dead = warning, still a failure
    w.close()


def test_malformed_json_records_are_skipped(tmp_path):
    w = SyntheticWriter(tmp_path, "bad", make_layers(1))
    w.step(0)
    bad = summary_pb2.Summary(value=[summary_pb2.Summary.Value(
        tag=metadata.TAG_EVENTS,
        metadata=metadata.create_summary_metadata({"kind": "events"}),
        tensor=tensor_util.make_tensor_proto(np.array("{not json", dtype=object)),
    )])
    w._writer.add_event(event_pb2.Event(step=1, summary=bad))
    w.step(2, events=[event(2, "fc0", "no_gradient"), "not a dict"])
    w.close()
    a = App(tmp_path)
    got = a.json(f"{BASE}/events?run=bad")
    assert [e["kind"] for e in got["events"]] == ["no_gradient"]
    assert a.json(f"{BASE}/runs")["runs"][0]["status"] == "failing"


def test_loader_keeps_every_step_unless_the_user_says_otherwise():
    class Flags:
        samples_per_plugin = {}

    f = Flags()
    plugin.NeuralDbgLoader().fix_flags(f)
    assert f.samples_per_plugin == {metadata.PLUGIN_NAME: 0}
    f.samples_per_plugin = {metadata.PLUGIN_NAME: 50, "scalars": 10}
    plugin.NeuralDbgLoader().fix_flags(f)
    assert f.samples_per_plugin == {metadata.PLUGIN_NAME: 50, "scalars": 10}


def test_sampling_hint_is_passed_as_downsample(logdir_and_truth):
    a = App(logdir_and_truth[0], sampling=5)
    got = a.json(f"{BASE}/heatmap?run=failing&metric=grad_norm&max_cols=5000")
    assert got["cols"] == 5  # the user asked TensorBoard to keep 5 points a tag


def test_big_answers_are_gzipped_and_b64_is_not(app, monkeypatch):
    monkeypatch.setattr(plugin, "_FAST_GZIP_BYTES", 0)
    path = f"{BASE}/heatmap?run=failing&metric=grad_norm"
    plain = app.client.get(path)
    zipped = app.client.get(path, headers={"Accept-Encoding": "gzip"})
    assert "Content-Encoding" not in plain.headers
    assert zipped.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(zipped.get_data()) == plain.get_data()
    b64 = app.client.get(path + "&format=b64", headers={"Accept-Encoding": "gzip"})
    assert b64.status_code == 200 and "Content-Encoding" not in b64.headers
    assert b64.headers["Content-Type"] == "application/json"
    assert b64.headers["Cache-Control"] == "no-cache, must-revalidate"
    assert json.loads(b64.get_data(as_text=True))["cols"] == 40
    # its length told (the tab reads it whole)
    assert int(b64.headers["Content-Length"]) == len(b64.get_data())


def test_two_event_records_at_one_step_both_count(tmp_path):
    """The plugin keeps whatever the provider returns. (The Rust data server
    itself keeps only the LAST record of a tag at a step -- it treats a
    repeated step as a restart -- so writers must write one per step.)"""
    from tb_neuraldbg.format import summary

    w = SyntheticWriter(tmp_path, "end", make_layers(2))
    w.step(0)
    w.step(1, events=[event(1, "fc0", "dead_activation")])
    # e.g. the events only decidable at the end, written at the last step too
    w._add(summary.events_summary([event(0, "fc1", "frozen_weights")]), 1, None)
    w.close()
    got = App(tmp_path).json(f"{BASE}/events?run=end")
    assert [(e["step"], e["kind"]) for e in got["events"]] == [
        (0, "frozen_weights"), (1, "dead_activation")]


def test_layer_detail_metric_subset(app, truth):
    t = truth["failing"]
    got = app.json(f"{BASE}/layer?run=failing&layer=fc2&metric=act_std&metric=grad_norm")
    assert list(got["metrics"]) == ["act_std", "grad_norm"]
    np.testing.assert_array_equal(f32(got["metrics"]["grad_norm"]),
                                  t.stats[:, t.row("fc2"), M["grad_norm"]])
    app.get(f"{BASE}/layer?run=failing&layer=fc2&metric=bogus", status=400)


def test_run_without_states_or_steps(tmp_path):
    from tb_neuraldbg.format import summary

    layers = make_layers(1)
    w = EventFileWriter(str(tmp_path / "nostates"))
    rows = [np.full((4, len(metadata.METRICS)), v, np.float32) for v in (0.5, 1e-7, 2.0)]
    w.add_event(event_pb2.Event(step=4, summary=summary.layers_summary(layers)))
    for step, row in zip((4, 5, 6), rows):
        w.add_event(event_pb2.Event(step=step, summary=summary.stats_summary(row)))
    w.close()
    w = EventFileWriter(str(tmp_path / "configonly"))
    w.add_event(event_pb2.Event(step=0, summary=summary.config_summary({"a": 1})))
    w.close()
    a = App(tmp_path)
    runs = {r["run"]: r for r in a.json(f"{BASE}/runs")["runs"]}
    assert runs["nostates"]["num_steps"] == 3 and runs["nostates"]["first_step"] == 4
    assert runs["configonly"]["num_steps"] == 0 and runs["configonly"]["first_step"] is None
    got = decode(a.json(f"{BASE}/heatmap?run=nostates&metric=act_std&max_cols=1"))
    assert got["states"] == [metadata.STATE_UNKNOWN] * 4
    assert got["values"] == pytest.approx([1e-7] * 4)  # farthest from 1
    got = a.json(f"{BASE}/heatmap?run=configonly&metric=grad_norm")
    assert (got["rows"], got["cols"], got["values"]) == (0, 0, [])
    assert a.json(f"{BASE}/meta?run=configonly")["layers"] == []
