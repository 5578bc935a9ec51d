"""Updates the weights cannot hold (docs/diagnosis.md, "An update the weights
cannot hold"): the writer's count of updated elements that the optimizer's
step left unchanged (``update_lost_frac``, ``update_elements``), and the
<optimizer> finding when most of the model's updated elements round away.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from tb_neuraldbg import DebugWriter, metadata
from tb_neuraldbg.diagnosis import Engine, Thresholds
from tb_neuraldbg.reader import read_logdir
from tb_neuraldbg.training.step import stats
from tests.test_diagnosis import Run, feed
from tests.test_diagnosis_rules import _facts, _root

M = metadata.METRIC_INDEX


# ------------------------------------------------------------ the writer's count


def test_rounded_away_counts_unchanged_elements_among_those_with_a_gradient():
    d = torch.tensor([0.0, 0.0, 1e-30, 0.0, 2e-3])  # w_{t-1} - w_t (1e-30 * 0.1: no underflow)
    g = torch.tensor([0.5, 0.0, 0.1, 0.2, 0.0])  # a zero gradient is no update, lost or not
    graded, lost = stats.rounded_away([d], [g])
    assert int(graded[0]) == 3 and int(lost[0]) == 2


def _train(dtype, opt, lr, steps=12, tmp=None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1)).to(dtype)
    optimizer = (torch.optim.Adam if opt == "adam" else torch.optim.SGD)(model.parameters(), lr=lr)
    with DebugWriter(str(tmp)) as w:
        w.watch(model, optimizer=optimizer, criterion=nn.MSELoss())
        g = torch.Generator().manual_seed(1)
        for _ in range(steps):
            x = torch.randn(32, 16, generator=g)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x.to(dtype)).float(), x[:, :1])
            loss.backward()
            optimizer.step()
    (run,) = read_logdir(str(tmp))
    return run


def _column(run, layer, metric):
    return run.stats[:, run.layer_names.index(layer), run.metrics.index(metric)]


def test_bf16_weights_under_adam_at_1e_4_lose_most_updates_and_the_layers_say_their_dtype(tmp_path):
    run = _train(torch.bfloat16, "adam", 1e-4, tmp=tmp_path)
    lost = _column(run, "0", "update_lost_frac")
    assert np.nanmedian(lost) > 0.5, lost
    assert np.nanmax(_column(run, "0", "update_elements")) == 16 * 64 + 64
    assert {l["name"]: l.get("dtype") for l in run.layers}["0"] == "bfloat16"
    assert run.diagnosis["root_cause"]["layer"] == "<optimizer>"
    assert "(bfloat16 weights)" in run.diagnosis["root_cause"]["message"]


@pytest.mark.parametrize("lr", [1e-4, 1e-7])
def test_float32_weights_hold_updates_of_a_tiny_rate(tmp_path, lr):
    # Adam at 1e-7 moves a weight of ~0.1 by ~1e-6 of itself: float32
    # resolves 6e-8 of it, so next to no element is left unchanged
    run = _train(torch.float32, "adam", lr, tmp=tmp_path)
    lost = _column(run, "0", "update_lost_frac")
    assert np.isfinite(lost).sum() >= 10 and np.nanmax(lost) < 0.2, lost
    assert {l["name"]: l.get("dtype") for l in run.layers}["0"] == "float32"


# ---------------------------------------------------------------- the detector


def _run(lost, dtype=None, steps=40, plant_more=None, sizes=None):
    """The healthy MLP run whose parameter rows lose ``lost`` (a number, or
    {row name: fraction}) of their updated elements at each update step;
    ``dtype``: the layers' dtype in the layer list (None: not said)."""
    run = Run()
    layers = [dict(l, dtype=dtype) if dtype and l["type"] == "Linear" else l for l in run.layers]
    eng = Engine(layers)
    sizes = sizes or {}

    def plant(s, r):
        _facts(run, r)
        if np.isfinite(r[run.params, M["update_ratio"]]).any():
            for k in run.params:
                name = run.names[k]
                r[k, M["update_lost_frac"]] = lost.get(name, 0.0) if isinstance(lost, dict) else lost
                r[k, M["update_elements"]] = sizes.get(name, 1000)
        if plant_more is not None:
            plant_more(s, r, run)

    feed(eng, run, range(steps), plant)
    return eng


def test_most_updated_elements_rounded_away_is_the_optimizers_from_the_first_update():
    eng = _run(0.8, dtype="bfloat16")
    assert _root(eng) == ("frozen_weights", "<optimizer>", 0)
    msg = eng.root_cause["message"]
    assert "rounded away" in msg and "(bfloat16 weights)" in msg and "master copy" in msg and "autocast" in msg


def test_a_minority_rounded_away_is_silent():
    # (SGD on half-precision weights at a rate whose updates mostly hold)
    eng = _run(0.3, dtype="bfloat16")
    assert eng.root_cause is None and eng.status == "healthy"


def test_one_small_layer_that_loses_all_its_updates_is_not_most_of_the_model():
    # fc0 and fc1 hold 10,000 updated elements each and keep theirs; fc2's 100 are lost
    eng = _run({"fc2": 1.0}, dtype="bfloat16", sizes={"fc0": 10_000, "fc1": 10_000, "fc2": 100})
    assert eng.root_cause is None


def test_float32_layers_are_the_rates_story_not_the_precisions():
    # (a float32 weight loses an update only below 6e-8 of itself: a rate
    # orders of magnitude too small, which the update-size rules judge)
    eng = _run(0.9, dtype="float32")
    assert not any(e.extra.get("cause") == "update_rounded" for e in eng.events)


def test_an_unknown_dtype_is_judged_by_the_count_alone():
    eng = _run(0.9)
    assert _root(eng) == ("frozen_weights", "<optimizer>", 0)
    assert "weights)" not in eng.root_cause["message"]


def test_layers_the_optimizer_does_not_hold_or_at_rate_zero_are_not_judged():
    def frozen_on_purpose(s, r, run):
        r[run.i("fc0"), M["opt_group"]] = -1
        r[run.i("fc1"), M["lr"]] = 0.0
        r[run.i("fc2"), M["grad_norm"]] = 0.0  # no gradient at all: nothing to update

    eng = _run(1.0, dtype="bfloat16", plant_more=frozen_on_purpose)
    assert not any(e.extra.get("cause") == "update_rounded" for e in eng.events)


def test_fewer_update_steps_than_the_persist_window_are_not_a_finding():
    # lost at the first update steps only, held from then on
    def held_later(s, r, run):
        if s >= Thresholds().frozen_steps - 1:
            r[run.params, M["update_lost_frac"]] = np.where(np.isfinite(r[run.params, M["update_lost_frac"]]),
                                                            0.0, np.nan)

    eng = _run(0.9, dtype="bfloat16", plant_more=held_later)
    assert not any(e.extra.get("cause") == "update_rounded" for e in eng.events)
