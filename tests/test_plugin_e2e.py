"""End to end: a real ``tensorboard --logdir`` process serves the plugin.

Both loaders: the Rust data server (``--load_fast=true``) and the Python one
(``--load_fast=false``). Checks the plugin listing, every route over HTTP, that
every step is kept (more than either loader's default sample of 100 / 10),
and that a run still being written shows new steps and events after a reload.
"""

import urllib.parse

import numpy as np
import pytest

from tb_neuraldbg import metadata
from tb_neuraldbg.format import binning
from tests import hostile as H
from tests.plugin_server import serve
from tests.synthetic import Plant, SyntheticWriter, event, make_layers, write_run

NUM_STEPS = 150  # above the Rust loader's default reservoir of 100 per tag
BASE = "/data/plugin/neuraldbg"

pytestmark = pytest.mark.slow  # a real tensorboard process a test


# tensorboard depends on tensorboard-data-server, so both loaders must work:
# a missing Rust server fails here rather than skipping.
@pytest.mark.parametrize("load_fast", ["true", "false"])
def test_real_tensorboard(load_fast, tmp_path):
    # A finished run, and a live run whose writer stays open.
    live_dir = tmp_path / "logs"
    live_dir.mkdir()
    truth = write_run(
        live_dir, "failing", num_modules=3, num_steps=NUM_STEPS,
        plants=[Plant(77, "fc1", "exploding", {"grad_norm": 3e5})],
        events=[event(77, "fc1", "exploding_gradient", value=3e5)],
    )
    # The same rows with block summaries, as DebugWriter writes them.
    blocked = write_run(
        live_dir, "blocks", num_modules=3, num_steps=NUM_STEPS, blocks=True,
        plants=[Plant(77, "fc1", "exploding", {"grad_norm": 3e5})],
        events=[event(77, "fc1", "exploding_gradient", value=3e5)],
    )
    # Resumed by a second writer: the first ends on a whole block, so its
    # close writes that block again, marked final, at the same step.
    for k, steps in enumerate((range(0, 80), range(80, 130))):
        with SyntheticWriter(live_dir, "resumed", make_layers(2), seed=7 + k, blocks=True) as w:
            for s in steps:
                w.step(s)
    live = SyntheticWriter(live_dir, "live", make_layers(2), seed=5, blocks=True)
    for s in range(3):
        live.step(s)
    live.flush()
    try:
        with serve(live_dir, load_fast=load_fast, log_path=tmp_path / "tb.log") as tb:
            listing = tb.wait_for(
                "plugins_listing",
                lambda: (lambda d: d if metadata.PLUGIN_NAME in d else None)(
                    tb.json("/data/plugins_listing")),
            )
            entry = listing[metadata.PLUGIN_NAME]
            assert entry["tab_name"] == "NeuralDbg" and entry["enabled"]
            assert entry["loading_mechanism"]["module_path"].endswith(f"{BASE}/index.js")

            def runs_loaded():
                runs = {r["run"]: r for r in tb.json(f"{BASE}/runs")["runs"]}
                ok = (runs.get("failing", {}).get("num_steps") == NUM_STEPS and "live" in runs
                      and runs.get("blocks", {}).get("num_steps") == NUM_STEPS
                      and runs.get("resumed", {}).get("num_steps") == 130)
                return runs if ok else None

            runs = tb.wait_for("both runs loaded", runs_loaded)
            f = runs["failing"]
            assert (f["status"], f["first_step"], f["last_step"]) == ("failing", 0, NUM_STEPS - 1)
            assert f["root_cause"]["layer"] == "fc1" and f["num_layers"] == 6

            meta = tb.json(f"{BASE}/meta?run=failing")
            assert meta["layers"] == truth.layers and meta["num_steps"] == NUM_STEPS

            hm = tb.json(f"{BASE}/heatmap?run=failing&metric=grad_norm&max_cols=10")
            assert hm["cols"] == 10 and hm["col_start"][0] == 0 and hm["col_end"][-1] == NUM_STEPS - 1
            row = truth.row("fc1")
            cell = row * 10 + 77 * 10 // NUM_STEPS
            assert hm["states"][cell] == metadata.STATE_CODE["exploding"]
            assert hm["values"][cell] == pytest.approx(3e5, rel=1e-6)

            full = tb.json(f"{BASE}/heatmap?run=failing&metric=state&max_cols=5000")
            assert full["cols"] == NUM_STEPS  # every step kept, no reservoir sample

            ev = tb.json(f"{BASE}/events?run=failing&kind=exploding_gradient")
            assert [e["step"] for e in ev["events"]] == [77]
            layer = tb.json(f"{BASE}/layer?run=failing&layer=fc1&start=70&end=80")
            assert layer["steps"] == list(range(70, 81))
            assert layer["states"][7] == metadata.STATE_CODE["exploding"]
            rep = tb.json(f"{BASE}/report")
            assert [r["run"] for r in rep["runs"]] == ["blocks", "failing", "live", "resumed"]

            # Binned from the block summaries: the rows' cells, in whole blocks.
            hm = tb.json(f"{BASE}/heatmap?run=blocks&metric=grad_norm&max_cols=10")
            assert hm["binned"] == "blocks" and hm["cols"] == 10
            starts = np.searchsorted(blocked.steps, hm["col_start"])
            values, states = binning.bin_rows(blocked.stats[:, :, metadata.METRIC_INDEX["grad_norm"]],
                                              blocked.states, starts, "grad_norm")
            assert hm["states"] == states.ravel().tolist()
            got = np.array([float(v) for v in hm["values"]], np.float32)  # "NaN" strings too
            np.testing.assert_array_equal(got, values.ravel())
            meta = tb.json(f"{BASE}/meta?run=blocks")
            assert (meta["first_step"], meta["last_step"], meta["num_steps"]) == (0, NUM_STEPS - 1, NUM_STEPS)
            hm = tb.json(f"{BASE}/heatmap?run=resumed&metric=state&max_cols=16")
            assert hm["binned"] == "blocks" and hm["cols"] == 16 and hm["col_end"][-1] == 129
            meta = tb.json(f"{BASE}/meta?run=resumed")
            assert (meta["first_step"], meta["last_step"], meta["num_steps"]) == (0, 129, 130)

            status, ctype, body = tb.fetch(f"{BASE}/index.js", gzip_ok=False)
            assert status == 200 and ctype.startswith("text/javascript")
            assert b"render" in body
            for path, code in (
                (f"{BASE}/heatmap?run=nope&metric=state", 404),
                (f"{BASE}/heatmap?run=failing&metric=state&start=5&end=1", 400),
                (f"{BASE}/heatmap?run=failing&metric=state&max_cols=999999", 400),
            ):
                status, ctype, _ = tb.fetch(path, gzip_ok=False)
                assert (status, ctype.split(";")[0]) == (code, "text/plain"), path

            # The live run gains steps and an event; a reload shows them.
            for s in range(3, 8):
                live.step(s, events=[event(s, "fc0", "no_gradient")] if s == 6 else ())
            live.flush()
            tb.wait_for(
                "live run to show new steps",
                lambda: tb.json(f"{BASE}/meta?run=live")["last_step"] == 7,
                timeout=60,
            )
            got = tb.wait_for(
                "live run's event",
                lambda: tb.json(f"{BASE}/events?run=live")["events"] or None,
                timeout=60,
            )
            assert [(e["step"], e["kind"]) for e in got] == [(6, "no_gradient")]
            hm = tb.json(f"{BASE}/heatmap?run=live&metric=grad_norm")
            # (its last step after the last block: binned from the rows)
            assert hm["col_end"][-1] == 7 and hm["cols"] == 8 and hm["binned"] == "steps"
    except AssertionError:
        print((tmp_path / "tb.log").read_text(errors="replace")[-4000:])
        raise
    finally:
        live.close()


def _damage(run_dir, how: str) -> None:
    """Break one record in the middle of a run's event file."""
    path = H.event_file(run_dir)
    recs = H.records(path)
    raw = open(path, "rb").read()
    offset, data = recs[len(recs) // 2]
    if how == "flip":  # a flipped bit: the data checksum fails
        b = bytearray(raw)
        b[offset + 12 + len(data) // 2] ^= 1
        new = bytes(b)
    elif how == "decode":  # not an Event, both checksums recomputed
        new = raw[:offset] + H.frame(b"\x0f" + data[1:]) + raw[offset + 16 + len(data):]
    else:  # "huge": a 1 TB length with a valid checksum
        new = raw[:offset] + H.frame(b"x", length=1 << 40)[:12] + raw[offset:]
    with open(path, "wb") as f:
        f.write(new)


@pytest.mark.parametrize("load_fast", ["true", "false"])
def test_hostile_runs_beside_good_ones(load_fast, tmp_path):
    """Every hostile input of the untrusted-logdir issue in one logdir: the good
    runs are served whole and no route answers 500, on both loaders."""
    logdir = tmp_path / "logs"
    truths = H.good_runs(logdir)
    for kind in H.BAD_TENSORS:
        H.bad_tensor_run(logdir, f"tensor_{kind}", kind)
    H.broadcast_run(logdir, "broadcast", num_records=5)
    H.future_run(logdir, "future", 2)
    H.nested_json_run(logdir, "nested", metadata.TAG_EVENTS)
    # Outside this plugin (README, "Untrusted logdirs"): a 1 TB length makes the
    # Rust data server abort on its allocation, and TensorBoard with it; a record
    # that is not an Event stops the Python loader's reload worker, so that the
    # runs it had not loaded yet never appear. Each loader gets what it survives.
    for how in ("flip",) + (("decode",) if load_fast == "true" else ("huge",)):
        write_run(logdir, f"damaged_{how}", num_modules=1, num_steps=20)
        _damage(logdir / f"damaged_{how}", how)
    expected = {n.name for n in logdir.iterdir() if n.name != "good"} - {"future"}
    try:
        with serve(logdir, load_fast=load_fast, log_path=tmp_path / "tb.log") as tb:
            def listed():
                got = tb.json(f"{BASE}/runs")
                names = {r["run"] for r in got["runs"]}
                return got if set(H.GOOD) <= names and len(names) >= 2 + 4 else None

            got = tb.wait_for("the good runs", listed, timeout=120)
            runs = {r["run"]: r for r in got["runs"]}
            for name, truth in truths.items():
                assert runs[name]["num_steps"] == truth.steps.size, name
                assert runs[name]["num_layers"] == len(truth.layers)
            assert "future" not in runs
            skipped = tb.wait_for("the future run refused", lambda: tb.json(f"{BASE}/runs")["skipped"])
            assert [s["run"] for s in skipped] == ["future"] and "newer" in skipped[0]["reason"]
            for run in sorted(set(runs) | expected | {"future"}):
                q = urllib.parse.quote(run)
                for path in (f"meta?run={q}", f"heatmap?run={q}&metric=grad_norm",
                             f"heatmap?run={q}&metric=state&format=b64", f"events?run={q}",
                             f"layer?run={q}&layer=fc0", "report", "runs"):
                    status, _, body = tb.fetch(f"{BASE}/{path}", gzip_ok=False)
                    assert status in (200, 404), (run, path, status, body[:200])
            assert tb.proc.poll() is None
            hm = tb.json(f"{BASE}/heatmap?run=good/failing&metric=grad_norm&max_cols=5000")
            assert hm["cols"] == 30
    except AssertionError:
        print((tmp_path / "tb.log").read_text(errors="replace")[-4000:])
        raise
