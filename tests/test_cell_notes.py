"""What blank cells mean (server/cells.py): steps a GradScaler skipped, a
row's sampling stride, why a row has none of the metric; and the heatmap
route's ``skipped`` / ``every`` / ``empty`` on a synthetic run."""

import numpy as np
import pytest

from tb_neuraldbg import metadata
from tb_neuraldbg.format import summary
from tb_neuraldbg.server import cells
from tests.synthetic import SyntheticWriter, healthy_row, make_layers, write_run
from tests.test_plugin_wsgi import App

NAN = np.nan


def test_a_lower_scale_at_the_next_step_marks_a_skipped_step():
    steps = np.array([0, 1, 2, 3, 4, 6, 7])
    scale = np.array([8, 8, 4, 2, 2, 1, 1], np.float32)
    # 1 and 2 were skipped (the scale fell after them); 4 -> 6 is not consecutive
    assert cells.scaler_skipped(scale, steps).tolist() == [False, True, True, False, False, False, False]
    assert cells.scaler_skipped(np.array([NAN, NAN]), np.array([0, 1])).tolist() == [False, False]
    # the last step, and a scale stuck at its bottom, are told by the non-finite gradients
    nonfinite = np.array([0, 0, 0, 0, 0, 3, 1], np.float32)
    assert cells.scaler_skipped(scale, steps, nonfinite).tolist() == [False, True, True, False, False, True, True]


def test_column_counts_bin_a_step_mask():
    steps = np.arange(10)
    mask = np.zeros(10, bool)
    mask[[1, 2, 7]] = True
    assert cells.column_counts(mask, steps, [0, 5], [4, 9]).tolist() == [2, 1]


def test_sampling_stride_is_the_writers_schedule():
    steps = np.arange(160)
    v = np.full((160, 4), NAN, np.float32)
    v[:, 0] = 1.0  # every step
    v[::10, 1] = 1.0  # full steps
    v[:10, 1] = 1.0
    v[:10, 2] = 1.0  # update steps: 0..9, then 100
    v[100, 2] = 1.0
    config = {"stats_every": 10, "update_every": 100}
    assert cells.sampling_every(v, steps, config).tolist() == [1, 10, 100, 0]
    # without a config: the longest gap
    assert cells.sampling_every(v[:, 1:2], steps, None).tolist() == [10]
    # a long run's strided rows (every 20th step, all full steps) are no gap
    # in a metric of full steps: it is sampled every 10 steps, not 100
    steps = np.r_[np.arange(40), np.arange(40, 200, 20)]
    v = np.full((steps.shape[0], 1), NAN, np.float32)
    v[steps % 10 == 0] = 1.0
    assert cells.sampling_every(v, steps, config).tolist() == [10]


def test_empty_rows_say_why():
    v = np.full((3, 5), NAN, np.float32)
    v[:, 1] = 1.0
    names = ["<input>", "fc1", "relu1", "fc2", "<loss>"]
    elsewhere = np.array([False, True, False, True, False])
    assert cells.empty_reasons(v, names, "grad_norm", elsewhere) == [
        "pseudo-layer", None, "no parameters", "not sampled", "pseudo-layer"]
    assert cells.empty_reasons(v, names, "act_dead_frac")[2] == "not measured"


def test_heatmap_route_sends_the_notes(tmp_path):
    write_run(tmp_path, "r", num_modules=2, num_steps=30, seed=1,
              config={"stats_every": 10, "update_every": 100, "scaler": True})
    app = App(str(tmp_path))
    hm = app.json("/data/plugin/neuraldbg/heatmap?run=r&metric=grad_norm")
    assert len(hm["every"]) == len(hm["empty"]) == hm["rows"]
    assert len(hm["skipped"]) == hm["cols"]
    row = hm["layers"].index("<input>")
    assert hm["empty"][row] == "pseudo-layer" and hm["every"][row] == 0
    state = app.json("/data/plugin/neuraldbg/heatmap?run=r&metric=state")
    assert "every" not in state and "empty" not in state


def test_a_heatmap_binned_from_blocks_says_why_rows_are_empty(tmp_path):
    write_run(tmp_path, "long", num_modules=2, num_steps=400, blocks=True, seed=3)
    app = App(str(tmp_path))
    hm = app.json("/data/plugin/neuraldbg/heatmap?run=long&metric=grad_norm&max_cols=10")
    assert hm["binned"] == "blocks"
    assert hm["empty"][hm["layers"].index("<loss>")] == "pseudo-layer"
    assert hm["empty"][hm["layers"].index("fc0")] is None
    # no scaler: no skipped steps; no stride in the config: a row with the metric reads 1
    assert "skipped" not in hm
    assert hm["every"][hm["layers"].index("fc0")] == 1 and hm["every"][hm["layers"].index("<loss>")] == 0


def test_block_every_is_the_schedule_unless_every_logged_step_is_on_it():
    names = ["<input>", "fc0", "<loss>"]
    config = {"stats_every": 10, "update_every": 100}
    has = np.array([True, True, False])
    consecutive = (np.array([0, 8, 16]), np.array([7, 15, 23]), np.array([8, 8, 8]))
    strided = (np.array([200, 360]), np.array([340, 500]), np.array([8, 8]))
    assert cells.block_every(has, names, "weight_norm", config, *consecutive).tolist() == [10, 10, 0]
    assert cells.block_every(has, names, "weight_norm", config, *strided).tolist() == [1, 1, 0]
    assert cells.block_every(has, names, "update_ratio", config, *strided).tolist() == [100, 100, 0]
    # the batch's statistics are measured at every step on <input>
    assert cells.block_every(has, names, "act_std", config, *consecutive).tolist() == [1, 10, 0]
    assert cells.block_every(has, names, "grad_norm", config, *consecutive).tolist() == [1, 1, 0]
    # consecutive steps below stats_every are all full steps
    assert cells.block_every(has, names, "weight_norm", config, [0], [7], [8]).tolist() == [1, 1, 0]


# A long AMP run (stats_every 10, update_every 100) written every step to
# step 200, then every 20th step, as a DebugWriter with full_steps=200 writes
# it. Skips: by the scale falling at the next step, by non-finite gradients.
_AMP_CONFIG = {"stats_every": 10, "update_every": 100, "full_steps": 200, "scaler": True}
# (40 and 100: a skipped full step, and update step, is no gap in the sampling)
_SKIP_BY_SCALE = (37, 38, 40, 100, 121)
_SKIP_BY_NONFINITE = (151, 420, 660, 980)
_INPUT_FULL = sorted(cells.FULL_STEP_METRICS - {"act_mean", "act_std", "act_absmax"})
_AMP_STEPS = list(range(200)) + list(range(200, 1001, 20))


@pytest.fixture(scope="module")
def amp_app(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("amp")
    layers = make_layers(3)
    names = [l["name"] for l in layers]
    rng = np.random.default_rng(7)
    scale = 65536.0
    with SyntheticWriter(logdir, "amp", layers, config=_AMP_CONFIG, blocks=True) as w:
        for step in _AMP_STEPS:
            row = healthy_row(layers, step, rng)
            full = step < 10 or step % 10 == 0
            update = step < 10 or step % 100 == 0
            if not full:  # (the batch's own statistics are measured at every step)
                row[1:, [metadata.METRIC_INDEX[m] for m in cells.FULL_STEP_METRICS]] = np.nan
                row[0, [metadata.METRIC_INDEX[m] for m in _INPUT_FULL]] = np.nan
            if not update:
                row[:, metadata.METRIC_INDEX["update_ratio"]] = np.nan
            if step - 1 in _SKIP_BY_SCALE:
                scale /= 2  # the skip of the step before lowered it
            row[names.index("<optimizer>"), metadata.METRIC_INDEX["scale"]] = scale
            if step in _SKIP_BY_NONFINITE:
                row[names.index("fc1"), metadata.METRIC_INDEX["grad_nonfinite"]] = 5
            w.step(step, row)
    return App(str(logdir))


def _columns_of(hm, steps):
    """How many of ``steps`` fall in each of the answer's columns."""
    return [sum(1 for s in steps if a <= s <= b) for a, b in zip(hm["col_start"], hm["col_end"])]


@pytest.mark.parametrize("metric", ["weight_norm", "update_ratio", "state"])
def test_a_heatmap_binned_from_blocks_counts_the_scalers_skips(amp_app, metric):
    hm = amp_app.json(f"/data/plugin/neuraldbg/heatmap?run=amp&metric={metric}&max_cols=7")
    assert hm["binned"] == "blocks" and hm["cols"] == 7
    skipped = _SKIP_BY_SCALE + _SKIP_BY_NONFINITE
    assert hm["skipped"] == _columns_of(hm, skipped)
    assert sum(hm["skipped"]) == len(skipped)


def test_blocks_and_rows_give_the_same_notes(amp_app):
    url = "/data/plugin/neuraldbg/heatmap?run=amp&metric={}&max_cols={}"
    for metric in ("weight_norm", "update_ratio", "grad_norm", "act_std"):
        blocks = amp_app.json(url.format(metric, 7))
        rows = amp_app.json(url.format(metric, 5000))
        assert (blocks["binned"], rows["binned"]) == ("blocks", "steps")
        assert blocks["every"] == rows["every"], metric
        assert blocks["empty"] == rows["empty"], metric
        # the rows' skipped steps, counted on the blocks' columns
        assert sum(rows["skipped"]) == sum(blocks["skipped"])
    fc1 = blocks["layers"].index("fc1")
    assert amp_app.json(url.format("weight_norm", 7))["every"][fc1] == 10
    assert amp_app.json(url.format("update_ratio", 7))["every"][fc1] == 100


def test_a_strided_range_from_blocks_has_every_full_step(amp_app):
    whole = amp_app.json("/data/plugin/neuraldbg/heatmap?run=amp&metric=weight_norm&max_cols=30")
    assert whole["binned"] == "blocks"
    # from the first block wholly in the strided rows to the last
    start = next(a for a in whole["col_start"] if a > 200)
    url = f"/data/plugin/neuraldbg/heatmap?run=amp&start={start}&end=1000&max_cols={{}}&metric={{}}"
    for metric, want in (("weight_norm", 1), ("update_ratio", 100)):
        blocks, rows = amp_app.json(url.format(3, metric)), amp_app.json(url.format(5000, metric))
        assert (blocks["binned"], rows["binned"]) == ("blocks", "steps")
        fc1 = blocks["layers"].index("fc1")
        assert blocks["every"][fc1] == rows["every"][fc1] == want
        assert blocks["skipped"] == _columns_of(blocks, [s for s in _SKIP_BY_NONFINITE if s >= start])


def test_the_blocks_path_reads_the_skips_once_and_keeps_only_the_steps(amp_app, monkeypatch):
    app = App(amp_app.logdir)
    data, rows_read = app.plugin._data, []
    read = data.read

    def counted(ctx, eid, run, tags, listing=None, *, keep=True):
        rows_read.extend((t, keep) for t in tags if t in summary.ROW_TAGS)
        return read(ctx, eid, run, tags, listing, keep=keep)

    monkeypatch.setattr(data, "read", counted)
    url = "/data/plugin/neuraldbg/heatmap?run=amp&metric={}&max_cols=7"
    for metric in ("weight_norm", "update_ratio", "state", "weight_norm"):
        assert sum(app.json(url.format(metric))["skipped"]) == len(_SKIP_BY_SCALE + _SKIP_BY_NONFINITE)
    # the scale and non-finite gradient rows once, not cached; no other rows
    assert sorted(rows_read) == sorted((t, False) for t in cells.SKIP_TAGS)


def test_a_skip_on_a_windows_last_step_is_told_by_the_step_after_it(amp_app):
    # 38's skip shows in the scale at 39, outside the window: the rows path
    # reads the run's skips (cells.run_skips), not the window's rows alone
    url = "/data/plugin/neuraldbg/heatmap?run=amp&metric={}&start=30&end={}&max_cols=5000"
    for metric in ("weight_norm", "state"):
        hm = amp_app.json(url.format(metric, 38))
        assert hm["binned"] == "steps"
        assert hm["skipped"] == _columns_of(hm, (37, 38)) and sum(hm["skipped"]) == 2
    # a skipped full step at a window's edge is sampled still
    hm = amp_app.json(url.format("weight_norm", 40))
    assert sum(hm["skipped"]) == 3 and hm["every"][hm["layers"].index("fc1")] == 10


def test_a_skipped_full_step_is_a_sample_not_a_gap():
    steps = np.arange(60)
    v = np.full((60, 1), NAN, np.float32)
    v[::10] = 1.0
    v[20] = NAN  # (as the writer may store a skipped step's statistics)
    skipped = np.isin(steps, [20, 35])
    config = {"stats_every": 10}
    assert cells.sampling_every(v, steps, None).tolist() == [20]  # unskipped, a gap
    assert cells.sampling_every(v, steps, None, skipped).tolist() == [10]
    assert cells.sampling_every(v, steps, config, skipped).tolist() == [10]
    # a metric of every step stays every step when a skipped step lacks it
    assert cells.sampling_every(np.where(skipped[:, None], NAN, 1.0), steps, config, skipped).tolist() == [1]
