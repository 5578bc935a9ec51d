"""Where a growth begins (docs/diagnosis.md, "Where a growth begins";
tb_neuraldbg/diagnosis/aspects/growth.py): an explosion that crosses its
threshold at a later module is blamed on the first module an order of
magnitude above the batch (over depth) or the first that grew tenfold over
its own first measurement (over time)."""

from __future__ import annotations

import numpy as np

from tb_neuraldbg import metadata
from tb_neuraldbg.diagnosis import Engine
from tb_neuraldbg.diagnosis.aspects.growth import GrowthOrigin
from tests.test_diagnosis import Run, feed

M = metadata.METRIC_INDEX
ALL = np.ones(5, dtype=bool)


def _origin():
    g = GrowthOrigin(10.0)
    g.grow(5)
    return g


def _explodes(g, row, cumulative=True):
    """Note the onset of an explosion of ``row`` (a pending, unconfirmed state)."""
    exploding = np.zeros(5, dtype=bool)
    exploding[row] = True
    cum = exploding & cumulative
    g.note_onset(exploding, np.zeros(5, dtype=bool), ALL, cum)


def test_over_depth_the_first_module_ten_times_the_batch_is_where_it_began():
    g = _origin()
    g.feed(0, np.array([1.0, 3.0, 15.0, 150.0, 1500.0]), ALL, 1.0)
    _explodes(g, 4)
    assert g.origin(4, 0, cumulative=True) == (2, 0)


def test_a_modules_own_amplification_stays_its_own():
    g = _origin()
    g.feed(0, np.array([1.0, 3.0, 15.0, 150.0, 1500.0]), ALL, 1.0)
    _explodes(g, 4, cumulative=False)  # it amplified the row before it a hundredfold: its own
    assert g.origin(4, 0, cumulative=False) is None


def test_the_onset_picture_is_kept_until_the_explosion_is_confirmed():
    g = _origin()
    g.feed(0, np.array([1.0, 3.0, 15.0, 150.0, 1500.0]), ALL, 1.0)
    _explodes(g, 4)
    # steps later, everything has grown on: the first row is ten times the batch too
    g.feed(2, np.array([1.0, 300.0, 1e4, 1e6, 1e8]), ALL, 1.0)
    _explodes(g, 4)
    assert g.origin(4, 0, cumulative=False) == (2, 0)


def test_over_time_the_first_module_to_grow_tenfold_is_where_it_began():
    g = _origin()
    for step in range(0, 60, 10):
        up = 1.6 ** step / 10  # rows 2 and on grow from step 10; row 1 never
        std = np.array([1.0, 0.7, 0.5 * max(1.0, up), 0.8 * max(1.0, up), 0.9 * max(1.0, up) ** 1.5])
        g.feed(step, std, ALL, 1.0)
    # row 4 explodes at 50; rows 2, 3 and 4 grew tenfold at the same step, row 2 first in forward order
    assert g.origin(4, 50, cumulative=False) == (2, int(g.grew_at[2]))
    assert g.grew_at[1] == -1 and g.grew_at[2] < 50


def test_a_module_that_grew_first_itself_keeps_its_explosion():
    g = _origin()
    g.feed(0, np.array([1.0, 0.5, 0.5, 0.5, 0.5]), ALL, 1.0)
    g.feed(10, np.array([1.0, 0.5, 0.6, 20.0, 30.0]), ALL, 1.0)  # row 3 first
    g.feed(20, np.array([1.0, 0.5, 8.0, 200.0, 400.0]), ALL, 1.0)
    assert g.origin(3, 30, cumulative=False) is None
    assert g.origin(4, 30, cumulative=False) == (3, 10)


def test_a_branch_growing_from_nothing_below_the_batch_is_no_growth():
    g = _origin()
    g.feed(0, np.array([1.0, 1e-4, 0.5, 0.5, 0.5]), ALL, 1.0)  # a zero-initialised branch (Fixup)
    g.feed(10, np.array([1.0, 0.3, 0.5, 0.5, 0.5]), ALL, 1.0)
    assert g.grew_at[1] == -1


def test_an_engine_blames_the_start_of_a_compounding_growth():
    run = Run(hidden=3)
    eng = Engine(run.layers)
    scale = {"fc0": 3.0, "relu0": 2.0, "fc1": 15.0, "relu1": 10.0, "fc2": 80.0, "relu2": 55.0, "fc3": 1500.0}

    def plant(s, r):
        if run.full(s):
            for name, v in scale.items():
                r[run.i(name), M["act_std"]] = v
                r[run.i(name), M["act_absmax"]] = 4 * v

    feed(eng, run, range(30), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("activation_explosion", "fc1", 0), rc
    (ev,) = [e for e in eng.events if e.layer == "fc1" and e.extra.get("cause") == "growth_onset"]
    assert ev.extra["symptom_layer"] == "fc3" and "begins here" in ev.message


def test_an_engine_keeps_a_single_layer_explosion_on_that_layer():
    run = Run(hidden=3)
    eng = Engine(run.layers)

    def plant(s, r):
        if run.full(s):  # fc2 multiplies its input a thousandfold: its own explosion
            for name, v in {"fc2": 900.0, "relu2": 600.0, "fc3": 700.0}.items():
                r[run.i(name), M["act_std"]] = v
                r[run.i(name), M["act_absmax"]] = 4 * v

    feed(eng, run, range(30), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"]) == ("activation_explosion", "fc2"), rc
