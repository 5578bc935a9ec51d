"""A cell's state and its event come from one decision (issue 44): the map
turns at the event's onset, not at its confirmation.

Pure tests of ``format.event_states.event_spans`` / ``apply_spans`` against
hand-written events, and (slow) the demo runs served by the plugin: the first
non-healthy cell of every layer with a failing event is that event's step.
"""

import numpy as np
import pytest

from tb_neuraldbg.format.event_states import apply_spans, event_spans
from tb_neuraldbg.format import metadata

S = metadata.STATE_CODE
H, U = S["healthy"], metadata.STATE_UNKNOWN
NAMES = ["<input>", "fc1", "fc2", "<loss>", "<optimizer>"]


def ev(step, layer, frm, to, severity="warning"):
    return {"step": step, "layer": layer, "from_state": frm, "to_state": to, "severity": severity}


def test_a_span_runs_from_onset_to_the_event_that_leaves_the_state():
    spans = event_spans([ev(3, "fc1", "healthy", "exploding", "error"),
                         ev(7, "fc1", "exploding", "nonfinite", "error"),
                         ev(9, "fc1", "nonfinite", "healthy", "info")], NAMES, 20)
    assert sorted(spans) == [(1, S["exploding"], 3, 6), (1, S["nonfinite"], 7, 8)]


def test_an_unended_state_runs_to_the_last_step_and_unknowns_are_left_out():
    spans = event_spans([ev(5, "<optimizer>", "healthy", "exploding", "error"),
                         ev(2, "nope", "healthy", "exploding"),
                         ev(1, "fc2", "healthy", "no_such_state"),
                         ev(4, "fc2", "exploding", "healthy", "info")], NAMES, 12)
    assert spans == [(4, S["exploding"], 5, 12)]


def test_cells_take_the_state_from_onset_to_confirmation_only():
    steps = np.arange(10)
    states = np.full((10, len(NAMES)), H, np.uint8)
    states[6:, 1] = S["vanishing"]  # confirmed at step 6, onset 0
    states[:, 4] = U  # a row without a state of its own
    out = apply_spans(states, steps, steps, [(1, S["vanishing"], 0, 9), (4, S["exploding"], 4, 9)])
    assert out[:, 1].tolist() == [S["vanishing"]] * 10
    assert out[:, 4].tolist() == [U] * 4 + [S["exploding"]] * 6
    assert (states[:6, 1] == H).all(), "the input is not changed"
    # a worse state already there stays
    states[2, 1] = S["nonfinite"]
    assert apply_spans(states, steps, steps, [(1, S["vanishing"], 0, 9)])[2, 1] == S["nonfinite"]


def test_binned_cells_covering_a_span_take_its_state():
    first, last = np.array([0, 10, 20]), np.array([9, 19, 29])
    states = np.full((3, 2), H, np.uint8)
    out = apply_spans(states, first, last, [(0, S["dead"], 12, 13)])
    assert out[:, 0].tolist() == [H, S["dead"], H]
    assert apply_spans(states, first, last, [(5, S["dead"], 0, 9)]) is states


@pytest.mark.slow  # trains the demo scenarios
def test_demo_first_failing_cell_is_the_event_onset(tmp_path):
    pytest.importorskip("tb_neuraldbg._demo")
    from tests.browser_checks import neuraldbg
    from tests.test_plugin_wsgi import App

    logdir = tmp_path / "demo"
    assert neuraldbg("demo", "--no-serve", "--logdir", str(logdir)).returncode == 0
    app = App(str(logdir))
    rank = np.array([metadata.state_rank(c) if c in S.values() else -1 for c in range(256)])
    checked = 0
    for run in app.json("/data/plugin/neuraldbg/runs")["runs"]:
        name = run["run"]
        events = app.json(f"/data/plugin/neuraldbg/events?run={name}")["events"]
        hm = app.json(f"/data/plugin/neuraldbg/heatmap?run={name}&metric=state&max_cols=5000")
        cols = hm["cols"]
        assert hm["col_start"] == hm["col_end"], "one step a column"
        states = np.array(hm["states"]).reshape(hm["rows"], cols)
        onset = {}
        for e in events:
            if e["severity"] != "info" and e["to_state"] != "healthy":
                onset.setdefault(e["layer"], e["step"])
        for layer, step in onset.items():
            row = hm["layers"].index(layer)
            failing = np.flatnonzero(rank[states[row]] > rank[H])
            assert failing.size, f"{name}: {layer} has an event at {step} and no failing cell"
            assert hm["col_start"][failing[0]] == step, (name, layer)
            checked += 1
    assert checked >= 10
