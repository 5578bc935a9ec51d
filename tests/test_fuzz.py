"""Fuzzing with a bounded budget: the reader over random and mutated event
files, every plugin route over random query strings.

Properties: nothing raises but the documented warnings, the good run beside
the damaged one reads exactly as written, and no request answers 500. The
budget (``max_examples``, no per-example deadline: the box is shared) keeps
the whole file well under a minute.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import urllib.parse
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tb_neuraldbg import metadata
from tb_neuraldbg.offline import records
from tb_neuraldbg.reader import NeuralDbgDataWarning, read_logdir
from tests import hostile as H
from tests.synthetic import Plant, event, write_run
from tests.hostile import PluginApp as App

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A good run, and the bytes of a small valid event file to damage."""
    root = tmp_path_factory.mktemp("template")
    good = write_run(root, "good", num_modules=2, num_steps=6, seed=3,
                     events=[event(4, "fc1", "dead_activation")])
    write_run(root, "victim", num_modules=1, num_steps=8,
              plants=[Plant(5, "fc0", "exploding", {"grad_norm": 1e6})],
              events=[event(5, "fc0", "exploding_gradient")])
    victim = open(H.event_file(root / "victim"), "rb").read()
    return root, good, victim


def _read_beside_good(root, good, name: str, data: bytes):
    """Put ``data`` as an event file beside the good run; read the logdir."""
    logdir = tempfile.mkdtemp(prefix="fuzz_")
    try:
        shutil.copytree(root / "good", os.path.join(logdir, "good"))
        os.makedirs(os.path.join(logdir, "bad"))
        with open(os.path.join(logdir, "bad", name), "wb") as f:
            f.write(data)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            runs = {r.name: r for r in read_logdir(logdir)}
        for w in caught:
            assert issubclass(w.category, NeuralDbgDataWarning), w
            assert "\n" not in str(w.message)
        g = runs["good"]
        np.testing.assert_array_equal(g.stats, good.stats)
        assert g.events == good.events and not g.incomplete and g.warnings == []
        return runs.get("bad")
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


_mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.integers(0, 7)),
    st.tuples(st.just("cut"), st.integers(0, 1 << 20), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 20), st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("length"), st.integers(0, 200),
              st.sampled_from([0, 1, 7, 1 << 20, 1 << 31, 1 << 40, (1 << 64) - 1])),
    st.tuples(st.just("repeat"), st.integers(0, 1 << 20), st.integers(1, 4096)),
)


def _mutate(data: bytes, ops) -> bytes:
    b = bytearray(data)
    for op, where, arg in ops:
        if not b:
            break
        at = where % len(b)
        if op == "flip":
            b[at] ^= 1 << arg
        elif op == "cut":
            del b[at:]
        elif op == "insert":
            b[at:at] = arg
        elif op == "repeat":
            b[at:at] = b[at:at + arg]
        elif op == "length":  # a new length with a VALID length checksum, at a record start
            starts, pos = [], 0
            while pos + 12 <= len(b):
                (n,) = struct.unpack_from("<Q", b, pos)
                starts.append(pos)
                pos += 16 + n
            if starts:
                s = starts[where % len(starts)]
                head = struct.pack("<Q", arg)
                b[s:s + 12] = head + struct.pack("<I", records.masked_crc(head))
    return bytes(b)


@FUZZ
@given(ops=st.lists(_mutation, min_size=1, max_size=4))
def test_mutated_event_files_never_hurt_the_good_run(template, ops):
    root, good, victim = template
    bad = _read_beside_good(root, good, "events.out.tfevents.1.bad", _mutate(victim, ops))
    if bad is not None:
        assert bad.stats.shape[0] == bad.steps.shape[0] <= 8
        assert bad.num_layers <= 4 * 4 + 256


@settings(FUZZ, max_examples=25)
@given(data=st.binary(max_size=4096))
def test_random_bytes_named_like_an_event_file(template, data):
    root, good, _ = template
    # Random bytes with our marker inside, so the file is walked, not skipped.
    _read_beside_good(root, good, "events.out.tfevents.2.bad", data + records.MARKER + data)


@settings(FUZZ, max_examples=60)
@given(data=st.binary(max_size=2048), limit=st.integers(0, 64))
def test_record_framing_over_random_bytes(tmp_path_factory, data, limit):
    path = tmp_path_factory.mktemp("frames") / "events.out.tfevents.x"
    path.write_bytes(H.frame(records.MARKER + data[:limit]) + data)
    problems = []
    got = list(records.read_events(str(path), problems.append, "f"))
    assert len(got) + len(problems) <= 1 + len(data) // 16 + 2
    assert all("\n" not in p for p in problems)


# -- routes ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile_app(tmp_path_factory):
    root = tmp_path_factory.mktemp("routes")
    H.good_runs(root)
    H.bad_tensor_run(root, "bad tensor", "dtype")
    H.nested_json_run(root, "deep", metadata.TAG_EVENTS)
    H.future_run(root, "future", 2)
    H.broadcast_run(root, "wide", num_records=3)
    return App(root)


_ROUTES = ["runs", "meta", "heatmap", "events", "layer", "report", "index.js", "nope"]
_KEYS = ["run", "metric", "start", "end", "max_cols", "format", "kind", "layer", "severity",
         "limit", "offset", "event_limit", "event_offset", "x"]
_VALUES = st.one_of(
    st.sampled_from(["good/failing", "good/healthy", "bad tensor", "deep", "future", "wide",
                     "fc0", "fc1", "<input>", "state", "grad_norm", "b64", "json", "nonfinite",
                     "error", "0", "1", "-1", "5000", "5001", "99999999999999999999999",
                     "1e3", "0x10", " 7", "", "NaN"]),
    st.text(max_size=40),
)


@pytest.mark.slow
@settings(FUZZ, max_examples=300)
@given(route=st.sampled_from(_ROUTES),
       params=st.lists(st.tuples(st.sampled_from(_KEYS), _VALUES), max_size=6),
       raw=st.one_of(st.none(), st.text(max_size=60)))
def test_routes_over_random_queries_never_answer_500(hostile_app, route, params, raw):
    query = urllib.parse.urlencode(params) if raw is None else urllib.parse.quote(raw, safe="=&")
    r = hostile_app.client.get(f"/data/plugin/neuraldbg/{route}?{query}")
    assert r.status_code in (200, 400, 404), (route, query, r.get_data(as_text=True)[:300])
    ctype = r.headers["Content-Type"].split(";")[0]
    if r.status_code == 200:
        assert ctype in ("application/json", "text/javascript")
    elif route != "nope":
        assert ctype == "text/plain"
