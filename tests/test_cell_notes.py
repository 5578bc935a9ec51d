"""What blank cells mean (server/cells.py): steps a GradScaler skipped, a
row's sampling stride, why a row has none of the metric; and the heatmap
route's ``skipped`` / ``every`` / ``empty`` on a synthetic run."""

import numpy as np

from tb_neuraldbg.server import cells
from tests.synthetic import write_run
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
    assert "every" not in hm and "skipped" not in hm
