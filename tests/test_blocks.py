"""Block summaries (docs/FORMAT.md): binning blocks' summaries gives what
binning their rows gives, and ``covering`` says when blocks stand for a run."""

import dataclasses

import numpy as np
import pytest

from tb_neuraldbg import metadata
from tb_neuraldbg.format import binning, blocks

M = len(metadata.METRICS)
H = metadata.STATE_CODE["healthy"]
CODES = np.array([H] * 30 + [metadata.STATE_CODE[s] for s in ("exploding", "nonfinite", "vanishing",
                                                              "dead", "no_gradient")]
                 + [metadata.STATE_UNKNOWN, 200], np.uint8)


def random_rows(rng, n, num_layers, signed=True, mixed=True):
    """Rows with every special value the rule cares about: NaN, +-inf, zeros
    of both signs, values equally far from 1 on either side, both signs."""
    v = (10.0 ** rng.uniform(-6, 6, (n, num_layers, M))).astype(np.float32)
    if signed:
        v *= rng.choice([-1, 1], v.shape)
    u = rng.random(v.shape)
    v[u < 0.05] = np.nan
    v[(u >= 0.05) & (u < 0.07)] = np.inf
    v[(u >= 0.07) & (u < 0.08)] = -np.inf if signed else np.inf
    v[(u >= 0.08) & (u < 0.10)] = 0.0
    v[(u >= 0.10) & (u < 0.11)] = -0.0
    v[(u >= 0.11) & (u < 0.14)] = 4.0
    v[(u >= 0.14) & (u < 0.17)] = 0.25  # as far from 1 as 4.0
    if signed:
        v[(u >= 0.17) & (u < 0.19)] = -4.0
    v[:, 0] = np.nan  # a layer never measured
    codes = CODES if mixed else np.array([H, H, H, metadata.STATE_CODE["exploding"]], np.uint8)
    states = rng.choice(codes, (n, num_layers)).astype(np.uint8)
    states[: n // 3, 1] = metadata.STATE_CODE["vanishing"]  # a layer failing for long
    return v, states


def block_bounds(rng, n, k):
    """Block starts: blocks of k rows, some cut short (a flush)."""
    starts, at = [], 0
    while at < n:
        starts.append(at)
        at += int(rng.integers(1, k + 1)) if rng.random() < 0.3 else k
    return np.array(starts, dtype=np.int64)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("signed", [True, False])
def test_bins_of_block_summaries_equal_bins_of_their_rows(seed, signed, monkeypatch):
    rng = np.random.default_rng(seed)
    if seed % 2:
        monkeypatch.setattr(binning, "_CHUNK_CELLS", 1)  # bin by bin
    n, num_layers = int(rng.integers(40, 300)), int(rng.integers(2, 7))
    rows, states = random_rows(rng, n, num_layers, signed, mixed=seed % 3 != 0)
    starts = block_bounds(rng, n, 8)
    ends = np.append(starts[1:], n)
    summaries = [binning.summarize(rows[a:b], states[a:b]) for a, b in zip(starts, ends)]
    bvals = np.stack([s[0] for s in summaries])  # [B, L, M]
    bstates = np.stack([s[1] for s in summaries])  # [B, L]
    for cols in (1, 3, len(starts) // 2 or 1, len(starts)):
        cut = binning.bin_bounds(len(starts), cols)  # bins of whole blocks
        row_starts = starts[cut]
        for metric in (*metadata.METRICS, binning.STATE_METRIC):
            j = metadata.METRIC_INDEX.get(metric)
            want = binning.bin_rows(None if j is None else rows[:, :, j], states, row_starts, metric)
            got = binning.bin_rows(None if j is None else bvals[:, :, j], bstates, cut, metric)
            np.testing.assert_array_equal(got[1], want[1], err_msg=f"{metric} states, {cols} cols")
            np.testing.assert_array_equal(got[0], want[0], err_msg=f"{metric} values, {cols} cols")
            # The sign of a non-zero value (a NaN's and a zero's mean nothing:
            # fmax picks either of 0.0 and -0.0, on rows as on blocks).
            measured = ~np.isnan(want[0]) & (want[0] != 0)
            assert np.array_equal(np.signbit(got[0])[measured], np.signbit(want[0])[measured]), metric


def test_summarize_is_binning_one_column():
    rng = np.random.default_rng(7)
    rows, states = random_rows(rng, 8, 5)
    values, worst = binning.summarize(rows, states)
    for metric, j in metadata.METRIC_INDEX.items():
        col_values, col_states = binning.bin_rows(rows[:, :, j], states, np.zeros(1, np.int64), metric)
        np.testing.assert_array_equal(values[:, j], col_values[:, 0], err_msg=metric)
        np.testing.assert_array_equal(worst, col_states[:, 0])


def test_builder_blocks_follow_each_other_and_pad_a_grown_layer_list():
    b = blocks.BlockBuilder(3)
    got = []
    for step in [0, 1, 2, 5, 9, 10, 11]:
        L = 2 if step < 9 else 3  # the list grows inside the second block
        row = np.full((L, M), float(step), np.float32)
        done = b.add(step, row, np.full(L, H, np.uint8))
        if done:
            got.append(done)
        if step == 9:
            assert not done
    got.append(b.close())
    assert b.close() is None
    assert [x.span.tolist() for x in got] == [[-1, 0, 2, 3, 0], [2, 5, 10, 3, 0], [10, 11, 11, 1, 0]]
    assert [x.step for x in got] == [2, 10, 11]
    second = got[1]
    assert second.values.shape == (3, M) and second.states.tolist() == [H, H, H]
    # layer 2 only at steps 9 and 10: its extreme of 9 and 10 (log: 10 is farther from 1)
    assert second.values[2, metadata.METRIC_INDEX["grad_norm"]] == 10.0
    assert second.values[0, metadata.METRIC_INDEX["act_zero_frac"]] == 10.0  # the maximum
    # The end: the last block again, marked final (nothing pending) ...
    again = b.close(final=True)
    assert again.span.tolist() == [10, 11, 11, 1, 1] and again.step == 11
    np.testing.assert_array_equal(again.values, got[2].values)
    # ... or the pending rows' block, final.
    b.add(12, np.zeros((3, M), np.float32), np.zeros(3, np.uint8))
    assert b.close(final=True).span.tolist() == [11, 12, 12, 1, 1]
    assert blocks.BlockBuilder().close(final=True) is None  # a writer that wrote no row


def _spans(*rows):
    s = np.array(rows, dtype=np.int64)
    return s, s[:, 2]


ONE = [{"blocks": metadata.BLOCK_ROWS}]


@pytest.mark.parametrize("spans, configs", [
    ([[-1, 0, 7, 8, 0], [7, 8, 15, 8, 0], [15, 16, 18, 3, 1]], ONE),
    ([[-1, 0, 7, 8, 0], [7, 8, 15, 8, 0], [15, 16, 18, 3, 0]], ONE),  # still being written
    ([[-1, 0, 7, 8, 1], [-1, 9, 15, 7, 0], [15, 16, 18, 3, 1]], ONE * 2),  # resumed after a close
])
def test_covering_accepts_chains_up_to_the_last_row(spans, configs):
    s, keys = _spans(*spans)
    assert blocks.covering(s, keys, configs, [18, 18]) == ""


@pytest.mark.parametrize("spans, configs, last, why", [
    ([[-1, 0, 7, 8, 0], [7, 8, 15, 8, 0]], ONE, [20], "rows after"),  # a writer killed mid-block
    ([[-1, 0, 7, 8, 0], [9, 10, 15, 5, 0]], ONE, [15], "missing"),  # a lost block (downsampled, a failed write)
    ([[0, 1, 7, 7, 0], [7, 8, 15, 8, 0]], ONE, [15], "writers"),  # the first block lost
    ([[-1, 0, 7, 8, 0], [-1, 9, 15, 7, 1]], ONE * 2, [15], "missing"),  # the first writer never closed
    ([[-1, 0, 7, 8, 1], [-1, 4, 15, 7, 1]], ONE * 2, [15], "order"),  # resumed from an earlier step
    ([[-1, 0, 7, 8, 0], [7, 8, 15, 8, 0]], ONE * 2, [15], "writers"),  # a writer without rows
    ([[-1, 0, 7, 8, 1], [7, 8, 15, 8, 0]], ONE, [15], "after a writer's last"),
    ([[-1, 0, 7, 8, 0], [7, 8, 15, 8, 0]], ONE + [{"synthetic": True}], [15], "did not write"),
    ([[-1, 0, 7, 8, 0], [7, 8, 15, 8, 0]], [], [15], "did not write"),
    ([[-1, 9, 7, 8, 0]], ONE, [7], "order"),
    ([[-1, 0, 7, 9, 0]], ONE, [7], "order"),  # more rows than steps
    ([[-1, 0, 7, 8, 0], [7, 7, 15, 8, 0]], ONE, [15], "order"),  # overlapping
    ([[-1, 0, 7, 8, 2]], ONE, [7], "after a writer's last"),
])
def test_covering_refuses_what_does_not_stand_for_every_row(spans, configs, last, why):
    s, keys = _spans(*spans)
    assert why in blocks.covering(s, keys, configs, last)


def test_covering_refuses_blocks_stored_at_another_step():
    spans, keys = _spans([-1, 0, 7, 8, 1])
    assert "stored" in blocks.covering(spans, keys + 1, ONE, [7])
    assert "no blocks" in blocks.covering(np.zeros((0, 5), np.int64), np.zeros(0), ONE, [7])
    assert "no blocks" in blocks.covering(spans[:, :4], keys, ONE, [7])  # an older span


# -- the plugin reads them ------------------------------------------------------

from tests import hostile  # noqa: E402
from tests.synthetic import Plant, SyntheticWriter, event, write_run  # noqa: E402
from tb_neuraldbg.format import summary  # noqa: E402
from tests.test_plugin_wsgi import BASE, App  # noqa: E402

NAN = float("nan")


def _answer(app, run, metric, cols, start=None, end=None):
    q = f"{BASE}/heatmap?run={run}&metric={metric}&max_cols={cols}&format=b64"
    if start is not None:
        q += f"&start={start}&end={end}"
    body = app.json(q)
    import base64

    values = np.frombuffer(base64.b64decode(body["values_b64"]), "<f4").reshape(body["rows"], body["cols"])
    states = np.frombuffer(base64.b64decode(body["states_b64"]), np.uint8).reshape(body["rows"], body["cols"])
    return body, values, states


def _rows_binned(truth, body, metric):
    """The truth's rows binned into the answer's own columns."""
    window = (truth.steps >= body["col_start"][0]) & (truth.steps <= body["col_end"][-1])
    steps = truth.steps[window]
    starts = np.searchsorted(steps, body["col_start"])
    assert np.array_equal(steps[np.append(starts[1:], len(steps)) - 1], body["col_end"])
    j = metadata.METRIC_INDEX.get(metric)
    values = None if j is None else truth.stats[window][:, :, j]
    return binning.bin_rows(values, truth.states[window], starts, metric)


@pytest.fixture(scope="module")
def block_logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("blocks")
    truth = {}
    truth["long"] = write_run(
        root, "long", num_modules=5, num_steps=400, stride=3, blocks=True, seed=3,
        plants=[Plant(600, "fc2", "exploding", {"grad_norm": 7e6}),
                Plant(900, "fc1", "nonfinite", {"grad_norm": NAN, "act_absmax": float("inf")},
                      until=930)],
        events=[event(600, "fc2", "exploding_gradient", value=7e6),
                event(900, "fc1", "nonfinite", value=None)],
        confirm_delay=6, grow={300: [{"name": "head.extra", "type": "Linear"}]})
    # The same rows by an older writer (no blocks): the reference.
    truth["plain"] = write_run(
        root, "plain", num_modules=5, num_steps=400, stride=3, seed=3,
        plants=[Plant(600, "fc2", "exploding", {"grad_norm": 7e6})])
    # A writer that stopped without closing: its last rows have no block.
    w = SyntheticWriter(root, "killed", blocks=True, seed=4)
    for step in range(100):
        w.step(step)
    w._writer.close()  # (not w.close(): the last block is never written)
    truth["killed"] = w.truth()
    # Runs resumed by a second writer, after a first that closed, or not.
    for run, closed in (("resumed", True), ("resumed_killed", False)):
        w = SyntheticWriter(root, run, blocks=True, seed=5)
        for step in range(76):
            w.step(step)
        if closed:
            w.close()
        else:
            w._writer.close()  # (its rows 72-75 in no block)
        first = w.truth()
        w = SyntheticWriter(root, run, blocks=True, seed=6)
        for step in range(80, 160):
            w.step(step)
        w.close()
        second = w.truth()
        truth[run] = dataclasses.replace(
            second, steps=np.concatenate([first.steps, second.steps]),
            stats=np.concatenate([first.stats, second.stats]),
            states=np.concatenate([first.states, second.states]))
    return root, truth


@pytest.fixture(scope="module")
def block_app(block_logdir):
    return App(block_logdir[0])


@pytest.mark.parametrize("metric", ["grad_norm", "act_mean", "act_dead_frac", "act_nonfinite", "state"])
@pytest.mark.parametrize("cols", [1, 7, 19])
@pytest.mark.parametrize("run", ["long", "resumed"])
def test_full_range_heatmap_from_blocks_is_the_rows_binned(block_app, block_logdir, metric, cols, run):
    truth = block_logdir[1][run]
    body, values, states = _answer(block_app, run, metric, cols)
    assert body["binned"] == "blocks" and body["cols"] == cols
    assert body["col_start"][0] == truth.steps[0] and body["col_end"][-1] == truth.steps[-1]
    want_values, want_states = _rows_binned(truth, body, metric)
    np.testing.assert_array_equal(states, want_states)
    np.testing.assert_array_equal(values, want_values)


def test_a_lone_failing_step_survives_in_blocks(block_app, block_logdir):
    body, values, states = _answer(block_app, "long", "grad_norm", 3)
    row = body["layers"].index("fc2")
    col = next(c for c in range(3) if body["col_start"][c] <= 600 <= body["col_end"][c])
    assert states[row, col] == metadata.STATE_CODE["exploding"]
    assert values[row, col] == np.float32(7e6)


def test_more_columns_than_blocks_bins_the_rows(block_app, block_logdir):
    truth = block_logdir[1]["long"]
    body, values, states = _answer(block_app, "long", "grad_norm", 200)
    assert body["binned"] == "steps" and body["cols"] == 200
    want_values, want_states = _rows_binned(truth, body, "grad_norm")
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(states, want_states)


def test_a_range_is_binned_from_blocks_only_when_it_cuts_none(block_app, block_logdir):
    truth = block_logdir[1]["long"]
    body, _, _ = _answer(block_app, "long", "grad_norm", 1)
    whole, _, _ = _answer(block_app, "long", "grad_norm", 10)
    # a range from a block's first step to another's last: blocks
    start, end = whole["col_start"][2], whole["col_end"][6]
    got, values, states = _answer(block_app, "long", "grad_norm", 4, start, end)
    assert got["binned"] == "blocks"
    assert got["col_start"][0] == start and got["col_end"][-1] == end
    want_values, want_states = _rows_binned(truth, got, "grad_norm")
    np.testing.assert_array_equal(values, want_values)
    # one step later it cuts a block: the rows, from that step on
    got, _, _ = _answer(block_app, "long", "grad_norm", 4, start + 3, end)
    assert got["binned"] == "steps" and got["col_start"][0] == start + 3


@pytest.mark.parametrize("run", ["plain", "killed", "resumed_killed"])
def test_blocks_that_do_not_stand_for_every_row_are_not_used(block_app, block_logdir, run):
    truth = block_logdir[1][run]
    body, values, states = _answer(block_app, run, "grad_norm", 2)
    assert body["binned"] == "steps"
    assert body["col_end"][-1] == truth.steps[-1]
    want_values, want_states = _rows_binned(truth, body, "grad_norm")
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(states, want_states)


@pytest.mark.parametrize("run", ["long", "killed", "resumed", "resumed_killed"])
def test_runs_and_meta_count_the_same_steps_from_blocks_or_rows(block_app, block_logdir, run):
    truth = block_logdir[1][run]
    runs = {r["run"]: r for r in block_app.json(f"{BASE}/runs")["runs"]}
    meta = block_app.json(f"{BASE}/meta?run={run}")
    for got in (runs[run], meta):
        assert (got["first_step"], got["last_step"], got["num_steps"]) == \
            (int(truth.steps[0]), int(truth.steps[-1]), len(truth.steps))
    assert runs[run]["num_layers"] == len(truth.layers) == len(meta["layers"])


def test_a_model_of_fewer_rows_than_a_span_is_named_as_it_is(tmp_path):
    """(The span is 4 values wide: it is no layer row.)"""
    layers = [{"name": "<input>", "type": "input"}, {"name": "<loss>", "type": "loss"}]
    truth = write_run(tmp_path, "tiny", layers=layers, num_steps=40, blocks=True)
    app = App(tmp_path)
    body, _, _ = _answer(app, "tiny", "grad_norm", 3)
    assert body["binned"] == "blocks" and body["layers"] == ["<input>", "<loss>"]
    meta = app.json(f"{BASE}/meta?run=tiny")
    assert [l["name"] for l in meta["layers"]] == ["<input>", "<loss>"] and meta["num_steps"] == len(truth.steps)


@pytest.mark.parametrize("kind", hostile.BAD_TENSORS)
def test_a_broken_span_record_bins_the_rows(tmp_path, kind):
    """An untrusted logdir: a block whose span record cannot be read costs
    the blocks (the rows are binned), never the answer."""
    w = SyntheticWriter(tmp_path, "run", blocks=True, seed=8)
    for step in range(43):  # five blocks, then three rows in a sixth
        w.step(step)
    block = w._blocks.close()
    summ = summary.block_summary(block.span, block.values, block.states, with_metadata=False)
    summ.value[-1].tensor.CopyFrom(hostile._bad_proto(kind, 4))
    w._add(summ, block.step, None)
    w._writer.close()
    truth = w.truth()
    app = App(tmp_path)
    body, values, states = _answer(app, "run", "grad_norm", 3)
    assert body["binned"] == "steps" and body["col_end"][-1] == 42
    want_values, want_states = _rows_binned(truth, body, "grad_norm")
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(states, want_states)
    assert app.json(f"{BASE}/meta?run=run")["num_steps"] == 43


def test_blocks_in_a_range():
    from tb_neuraldbg.server import heatmap

    b = heatmap.Blocks(np.array([0, 8, 16]), np.array([7, 15, 20]), np.array([8, 8, 5]), {})
    assert heatmap.blocks_in(b, 0, 20) == slice(0, 3)
    assert heatmap.blocks_in(b, -5, 99) == slice(0, 3)
    assert heatmap.blocks_in(b, 8, 15) == slice(1, 2)
    assert heatmap.blocks_in(b, 8, 16) is None  # cuts the third block
    assert heatmap.blocks_in(b, 9, 15) is None  # cuts the second
    assert heatmap.blocks_in(b, 10, 12) is None  # inside one block
    assert heatmap.blocks_in(b, 30, 40) == slice(3, 3)  # after every block: none
    # the rule's names where they were
    assert heatmap.bin_heatmap is binning.bin_heatmap and heatmap.MAX_RULE_METRICS is binning.MAX_RULE_METRICS


def test_a_covered_run_is_shown_without_reading_its_rows(block_logdir):
    """/runs, /meta and a full-range heatmap of a run its blocks cover read
    block and JSON tags only: no row tag is ever read (cached)."""
    app = App(block_logdir[0])
    app.json(f"{BASE}/runs")
    app.json(f"{BASE}/meta?run=long")
    body, _, _ = _answer(app, "long", "grad_norm", 10)
    assert body["binned"] == "blocks"
    read = {tag for (_, run, tag) in app.plugin._data._cache._items if run == "long"}
    assert metadata.TAG_BLOCK_SPAN in read and metadata.block_stats_tag("grad_norm") in read
    assert not read & {metadata.TAG_STATES, metadata.stats_tag("grad_norm")}, read
    # a plain run's /runs read its states
    plain = {tag for (_, run, tag) in app.plugin._data._cache._items if run == "plain"}
    assert metadata.TAG_STATES in plain
