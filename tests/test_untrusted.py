"""A shared logdir cannot hurt us: each hostile input, beside good runs.

For every case of the "untrusted logdir" issue: the reader, the CLI (report,
--json, export) and the plugin's routes (through TensorBoard's WSGI app and
its Python loader) keep the good runs, answer without a traceback or a 500,
finish (hang-prone cases run under a deadline), and say in one line what was
skipped. tests/test_plugin_e2e.py runs the same inputs through a real
``tensorboard`` on both loaders.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import jsonschema
import numpy as np
import pytest
from tb_neuraldbg import cli, metadata
from tb_neuraldbg.format import decode
from tb_neuraldbg.offline import records, text_report
from tb_neuraldbg.reader import NeuralDbgDataWarning, read_logdir
from tb_neuraldbg.server import plugin
from tests import hostile as H
from tests.hostile import PluginApp as App
from tests.synthetic import Plant, event, write_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def deadline(seconds: int):
    """Fail (TimeoutError) instead of hanging: a guard, not a speed goal."""

    def fire(*_):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


SCHEMA = json.load(open(os.path.join(ROOT, "docs", "report.schema.json")))


def valid(report: dict) -> dict:
    """``report`` validated against docs/report.schema.json (extensions included)."""
    jsonschema.validate(report, SCHEMA)
    return report


def good_in(runs) -> bool:
    names = [r["run"] if isinstance(r, dict) else r.name for r in runs]
    return all(g in names for g in H.GOOD)


def cli_json(logdir, capsys, *extra) -> tuple[int, dict, list[str]]:
    code = cli.main(["report", str(logdir), "--json", *extra])
    out = capsys.readouterr()
    lines = out.err.splitlines()
    assert "Traceback" not in out.err
    assert all(l.startswith("neuraldbg: ") for l in lines), lines
    return code, json.loads(out.out) if out.out else {}, lines


def cli_subprocess(*args, timeout=120):
    """The console command in a child process, killed if it hangs."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "tb_neuraldbg.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


# -- 1. JSON nested 1,000+ deep ---------------------------------------------------


@pytest.mark.parametrize("tag", [metadata.TAG_EVENTS, metadata.TAG_LAYERS, metadata.TAG_DIAGNOSIS])
def test_deeply_nested_json_is_skipped_with_a_note(tmp_path, capsys, tag):
    H.good_runs(tmp_path)
    H.nested_json_run(tmp_path, "deep", tag, depth=5000)
    with pytest.warns(NeuralDbgDataWarning, match="RecursionError"):
        runs = read_logdir(tmp_path)
    assert good_in(runs) and "deep" in [r.name for r in runs]
    code, rep, lines = cli_json(tmp_path, capsys)
    assert code == 0 and good_in(rep["runs"])
    deep = next(r for r in rep["runs"] if r["run"] == "deep")
    assert deep["incomplete"] and any("RecursionError" in w for w in deep["warnings"])
    assert all(len(l) < 400 for l in lines)  # one short line each, no 1,000-deep repr
    app = App(tmp_path)
    assert set(app.every_route("deep").values()) == {200}
    assert good_in(app.json("/runs")["runs"])
    got = next(r for r in app.json("/runs")["runs"] if r["run"] == "deep")
    assert got["incomplete"] and got["warnings"]


def test_nested_metadata_and_giant_integers_do_not_raise():
    with pytest.raises(ValueError):
        metadata.parse_plugin_metadata(H.nested_json(5000).encode())
    from tb_neuraldbg.format.contract import run_report

    notes = []
    bad = event(1, "fc0", "nonfinite")
    bad["step"] = 10**5000 if sys.get_int_max_str_digits() == 0 else 2**70
    rep = run_report("r", {"status": "failing", "root_cause": None}, [bad], notes.append)
    assert rep["events"] == [] and notes == [
        "skipped an event: expected an integer within int64, got an integer beyond int64"]


# -- 2. unreadable tensor protos ------------------------------------------------------


@pytest.mark.parametrize("kind", H.BAD_TENSORS)
@pytest.mark.parametrize("generic", [False, True], ids=["python-loader", "generic-provider"])
def test_unreadable_tensors_are_skipped_on_every_route(tmp_path, kind, generic):
    H.good_runs(tmp_path)
    rows = H.bad_tensor_run(tmp_path, "bad", kind)
    app = App(tmp_path, generic=generic)
    assert set(app.every_route("bad").values()) == {200}
    hm = app.json("/heatmap?run=bad&metric=grad_norm&max_cols=5000")
    assert hm["rows"] == rows
    if not generic:  # the record is skipped, the steps around it kept
        assert hm["col_end"][-1] == 5
    # (A provider that cannot decode one record loses the whole tag: said in a note.)
    runs = {r["run"]: r for r in app.json("/runs")["runs"]}
    assert good_in(runs.values())
    if not (generic and kind == "negative"):  # make_ndarray reads shape [-1] as "infer"
        assert runs["bad"]["incomplete"]
        assert any("grad_norm" in w or "could not read" in w for w in runs["bad"]["warnings"])
    with pytest.warns(NeuralDbgDataWarning, match="skipped a neuraldbg/stats/grad_norm record"):
        (bad,) = [r for r in read_logdir(tmp_path) if r.name == "bad"]
    assert bad.num_steps == 7 and np.isnan(bad.stats[6, :, metadata.METRIC_INDEX["grad_norm"]]).all()


# -- 3. huge length prefix, records that are not events -----------------------------


def _failing_tail_run(logdir, name="bad"):
    """A run whose failure (from step 30) is in the second half of its file."""
    write_run(logdir, name, num_modules=2, num_steps=40,
              plants=[Plant(30, "fc1", "nonfinite", {"grad_norm": float("nan")}, until=39)],
              events=[event(30, "fc1", "nonfinite")])
    path = H.event_file(os.path.join(str(logdir), name))
    return path, H.records(path), open(path, "rb").read()


def test_huge_length_prefix_loses_only_that_runs_tail(tmp_path, capsys):
    H.good_runs(tmp_path)
    path, recs, raw = _failing_tail_run(tmp_path)
    offset = recs[len(recs) // 2][0]
    header = H.frame(b"x", length=1 << 40)[:12]  # 1 TB announced, valid length checksum
    with open(path, "wb") as f:
        f.write(raw[:offset] + header + raw[offset:])
    with deadline(60):
        code, rep, lines = cli_json(tmp_path, capsys)
    assert code == 0 and good_in(rep["runs"])
    bad = next(r for r in rep["runs"] if r["run"] == "bad")
    # Its failure was in the lost tail: it must not read "healthy" silently.
    assert bad["status"] == "healthy" and bad["incomplete"] is True
    (line,) = [l for l in lines if "'bad'" in l]
    assert f"offset {offset} announces 1099511627776 bytes" in line and "not read" in line
    assert cli.main(["report", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "run bad" in text and "incomplete" in text.split("run bad")[1].splitlines()[0]
    out = tmp_path / "r.html"
    assert cli.main(["export", str(tmp_path), "-o", str(out)]) == 0
    assert "badge incomplete" in out.read_text()


def test_a_record_that_is_not_an_event_is_skipped_the_rest_read(tmp_path, capsys):
    H.good_runs(tmp_path)
    path, recs, raw = _failing_tail_run(tmp_path)
    offset, data = [r for r in recs if records.MARKER in r[1]][len(recs) // 3]
    # A flipped bit with both checksums recomputed: protobuf's DecodeError.
    bad = H.frame(b"\x0f" + data[1:])
    with open(path, "wb") as f:
        f.write(raw[:offset] + bad + raw[offset + 16 + len(data):])
    code, rep, lines = cli_json(tmp_path, capsys)
    bad_run = next(r for r in rep["runs"] if r["run"] == "bad")
    assert code == 0 and good_in(rep["runs"])
    assert bad_run["status"] == "failing" and bad_run["incomplete"]  # the tail was read
    assert any(f"record at offset {offset}" in l and "DecodeError" in l for l in lines)


def test_records_over_the_limit_are_stepped_over(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "_BLOCK", 1 << 10)
    # (over every record write_run makes, whatever the metrics; under the 9 KB ones)
    monkeypatch.setattr(records, "MAX_RECORD_BYTES", 1 << 13)
    write_run(tmp_path, "r", num_modules=1, num_steps=3)
    path = H.event_file(tmp_path / "r")
    big_foreign = H.frame(b"\x09" + b"\x00" * 9000)  # another tool's 9 KB record
    big_ours = H.frame(b"\x09" + records.MARKER + b"\x00" * 9000)
    H.write_frames(path, [big_foreign, big_ours])
    write_run(tmp_path, "r2", num_modules=1, num_steps=2)  # framing after them holds
    problems = []
    events = list(records.read_events(str(path), problems.append, "f"))
    assert len(events) > 3
    assert len(problems) == 1 and "over the limit" in problems[0]


# -- 4. silent tail loss -----------------------------------------------------------------


def test_lost_framing_makes_the_run_incomplete_not_healthy(tmp_path, capsys):
    H.good_runs(tmp_path)
    path, recs, raw = _failing_tail_run(tmp_path)
    offset = recs[len(recs) // 2][0]
    data = bytearray(raw)
    data[offset] ^= 1  # the length checksum fails: nothing after it can be framed
    with open(path, "wb") as f:
        f.write(bytes(data))
    with pytest.warns(NeuralDbgDataWarning, match="bad length checksum"):
        runs = {r.name: r for r in read_logdir(tmp_path)}
    bad = runs["bad"]
    assert bad.incomplete and bad.num_steps < 40
    (warning,) = bad.warnings
    assert f"bad length checksum at offset {offset}" in warning
    assert f"{len(raw) - offset} bytes not read" in warning
    assert not runs["good/healthy"].incomplete and runs["good/healthy"].warnings == []
    code, rep, _ = cli_json(tmp_path, capsys)
    got = next(r for r in valid(rep)["runs"] if r["run"] == "bad")
    assert got["incomplete"] and got["warnings"] == [warning]
    clean = next(r for r in rep["runs"] if r["run"] == "good/healthy")
    assert set(clean) == {"run", "status", "root_cause", "events"}  # exactly the contract


def test_a_flipped_bit_skips_one_record_only(tmp_path):
    path, recs, raw = _failing_tail_run(tmp_path)
    offset, data = recs[len(recs) // 2]
    b = bytearray(raw)
    b[offset + 12 + len(data) // 2] ^= 1
    with open(path, "wb") as f:
        f.write(bytes(b))
    with pytest.warns(NeuralDbgDataWarning, match="bad data checksum"):
        (run,) = read_logdir(tmp_path)
    assert run.incomplete and run.diagnosis["status"] == "failing"
    assert run.steps[-1] == 39


# -- 5. quadratic text wrapping -----------------------------------------------------------


@pytest.mark.parametrize("chars", [300_000, 10_000_000])
def test_giant_messages_render_bounded(tmp_path, chars):
    rep = {"runs": [{"run": "r", "status": "failing",
                     "root_cause": {"kind": "nonfinite", "layer": "fc0", "step": 1,
                                    "message": "x" * chars},
                     "events": [event(1, "fc0", "nonfinite", message="y" * chars)]}]}
    with deadline(60):
        text = text_report.format_report(rep)
    assert len(text) < 20 * text_report.MAX_TEXT
    words = " ".join(text.split())
    assert f"{chars - text_report.MAX_TEXT} more characters; --json has all" in words
    assert all(len(line) <= 80 for line in text.splitlines())


def test_cli_report_of_a_300k_character_message(tmp_path, capsys):
    H.good_runs(tmp_path)
    H.long_message_run(tmp_path, "long", 300_000)
    with deadline(120):
        assert cli.main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "more characters; --json has all" in " ".join(out.split()) and "run good/failing" in out
    code, rep, _ = cli_json(tmp_path, capsys)
    long = next(r for r in rep["runs"] if r["run"] == "long")
    assert len(long["root_cause"]["message"]) == 300_000  # the JSON keeps it whole
    app = App(tmp_path)
    got = app.json("/events?run=long")["events"][0]["message"]
    assert len(got) < plugin.MAX_TEXT + 100 and got.endswith("more characters]")


# -- 6. broadcast blow-up ------------------------------------------------------------------


def test_one_value_for_a_million_rows_is_not_broadcast(tmp_path):
    H.good_runs(tmp_path)
    H.broadcast_run(tmp_path, "wide")
    with pytest.warns(NeuralDbgDataWarning, match="1 values stored for 1048576 rows") as rec:
        runs = {r.name: r for r in read_logdir(tmp_path)}
    # One line per tag and reason, not one per record.
    assert len([r for r in rec if "1048576" in str(r.message)]) == len(metadata.METRICS) + 1
    wide = runs["wide"]
    assert wide.num_layers == 4 and wide.stats.nbytes < 1 << 20 and wide.incomplete
    app = App(tmp_path)
    assert set(app.every_route("wide").values()) == {200}
    assert len(app.json("/meta?run=wide")["layers"]) == 4


def test_rows_beyond_the_layer_list_are_believed_up_to_a_limit():
    notes = []
    rows = decode.decode_rows([0, 1], [np.ones(10_000, np.float32), np.ones(3, np.float32)],
                              np.float32, np.nan, notes.append, "t", decode.row_limit(3))
    assert rows.values.shape == (2, decode.row_limit(3)) and decode.row_limit(3) < 10_000
    assert notes == [f"skipped the rows past {decode.row_limit(3)} of 1 t records (the layer "
                     "list makes no more believable)"]


# -- 7. a future-format run ------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 99])
def test_future_format_run_is_refused_alone(tmp_path, capsys, version):
    H.good_runs(tmp_path)
    H.future_run(tmp_path, "future", version)
    code, rep, lines = cli_json(tmp_path, capsys)
    assert code == 0 and [r["run"] for r in rep["runs"]] == sorted(H.GOOD)
    (note,) = rep["notes"]
    assert note.startswith("run 'future'") and f"version {version} is newer" in note
    assert lines == [f"neuraldbg: warning: {note}"]
    valid(rep)
    app = App(tmp_path)
    runs = app.json("/runs")
    assert [r["run"] for r in runs["runs"]] == sorted(H.GOOD)
    assert [s["run"] for s in runs["skipped"]] == ["future"]
    assert f"version {version} is newer" in runs["skipped"][0]["reason"]
    r = app.get("/meta?run=future")
    assert r.status_code == 404 and "newer" in r.get_data(as_text=True)
    assert "future" in valid(app.json("/report"))["notes"][0]


def test_a_logdir_of_future_runs_only_is_exit_2_with_the_reason(tmp_path, capsys):
    H.future_run(tmp_path, "future", 2)
    assert cli.main(["report", str(tmp_path)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err.splitlines()
    assert "newer" in err[0] and err[-1].startswith("neuraldbg: error: no readable neuraldbg")


# -- 8. hostile filesystem objects ----------------------------------------------------------


@pytest.mark.slow
def test_fifos_links_to_root_and_loops_are_skipped(tmp_path):
    H.good_runs(tmp_path)
    os.mkfifo(tmp_path / "good" / "healthy" / "events.out.tfevents.0.fifo")
    os.makedirs(tmp_path / "fifo_only")
    os.mkfifo(tmp_path / "fifo_only" / "events.out.tfevents.1.x")
    os.symlink("/", tmp_path / "root")
    os.symlink(tmp_path, tmp_path / "good" / "loop")
    os.symlink(tmp_path / "good", tmp_path / "zz_again")  # read under its first name
    proc = cli_subprocess("report", tmp_path, "--json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    rep = json.loads(proc.stdout)
    assert [r["run"] for r in rep["runs"]] == sorted(H.GOOD)  # one copy each
    notes = rep["notes"]
    assert any("root: a link to /, which holds the logdir" in n for n in notes)
    assert any("loop: a link to" in n for n in notes)
    assert any("zz_again: a link to a directory already read" in n for n in notes)
    assert sum("a FIFO, not an event file" in n for n in notes) == 2
    assert proc.stderr.count("\n") == len(notes)
    proc = cli_subprocess("export", tmp_path, "-o", tmp_path / "r.html")
    assert proc.returncode == 0


def test_other_tools_records_are_not_parsed(tmp_path, monkeypatch):
    H.good_runs(tmp_path)
    truth = write_run(tmp_path, "mixed", num_modules=1, num_steps=20)
    ours = sum(sum(records.MARKER in data for _, data in H.records(H.event_file(tmp_path / n)))
               for n in [*H.GOOD, "mixed"])
    H.foreign_scalars(tmp_path / "mixed", 20_000)  # a file of their own
    H.foreign_scalars(tmp_path / "other_tool", 5_000)  # a directory of their own
    parsed = []
    real = records.event_pb2.Event.FromString
    monkeypatch.setattr(records.event_pb2.Event, "FromString",
                        staticmethod(lambda data: parsed.append(1) or real(data)))
    runs = {r.name: r for r in read_logdir(tmp_path)}
    assert sorted(runs) == sorted([*H.GOOD, "mixed"]) and runs["mixed"].num_steps == 20
    np.testing.assert_array_equal(runs["mixed"].stats, truth.stats)
    assert len(parsed) == ours  # not one of the 25,000 foreign records


# -- 9. unbounded answers ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    root = tmp_path_factory.mktemp("many")
    H.good_runs(root)
    H.many_events_run(root, "many", 30_000, per_record=3_000)
    return App(root)


def test_layer_events_are_paged(many):
    got = many.json("/layer?run=many&layer=fc0&metric=grad_norm")
    assert got["events_total"] == 15_000 and got["events_truncated"] is True
    assert len(got["events"]) == plugin.DEFAULT_EVENT_LIMIT
    nxt = many.json("/layer?run=many&layer=fc0&metric=grad_norm&event_limit=10&event_offset=14995")
    assert len(nxt["events"]) == 5 and nxt["events_truncated"] is False


def test_report_route_is_bounded_per_run(many):
    rep = valid(many.json("/report?limit=50"))
    big = next(r for r in rep["runs"] if r["run"] == "many")
    assert big["truncated"] is True and big["total_events"] == 30_000 and len(big["events"]) == 50
    small = next(r for r in rep["runs"] if r["run"] == "good/failing")
    assert "truncated" not in small and len(small["events"]) == 1
    assert many.get("/report?limit=0").status_code == 400


def test_runs_summary_is_cached_until_the_run_changes(many, monkeypatch):
    many.json("/runs")
    calls = []
    real = plugin.contract.run_report
    monkeypatch.setattr(plugin.contract, "run_report", lambda *a, **k: calls.append(1) or real(*a, **k))
    again = many.json("/runs")
    assert calls == [] and next(r for r in again["runs"] if r["run"] == "many")["num_events"] == 30_000
    many.json("/events?run=many&kind=nonfinite&limit=5")
    assert calls == []  # the events route reuses the cached report
