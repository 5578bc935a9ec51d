"""watch(layer_scalars_every=N): each module row's gradient norm and update
ratio also as plain TensorBoard scalars, at the written steps that are
multiples of N; off by default, and nothing else of the run changes."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn

from tb_neuraldbg import DebugWriter, metadata
from tb_neuraldbg.format.contract import run_report
from tb_neuraldbg.offline.reader import read_logdir
from tb_neuraldbg.training.schedule import WatchConfig

FAMILIES = tuple(f"{metadata.PLUGIN_NAME}_{m}/" for m in metadata.LAYER_SCALAR_METRICS)


def train(logdir, steps=30, **watch):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    crit = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    with DebugWriter(str(logdir)) as w:
        w.watch(m, optimizer=opt, criterion=crit, stats_every=5, update_every=10, **watch)
        for _ in range(steps):
            x, y = torch.randn(16, 4, generator=g), torch.randint(0, 3, (16,), generator=g)
            opt.zero_grad()
            crit(m(x), y).backward()
            opt.step()


def scalars(logdir) -> dict:
    """{tag: {step: value}} of the layer scalars in ``logdir``."""
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return {t: {e.step: e.value for e in acc.Scalars(t)} for t in acc.Tags()["scalars"] if t.startswith(FAMILIES)}


def expected(logdir, every: int) -> dict:
    """The same, from the neuraldbg rows read back: every module row's finite
    values at the written steps that are multiples of ``every``."""
    (run,) = read_logdir(logdir)
    out = {}
    for metric in metadata.LAYER_SCALAR_METRICS:
        j = metadata.METRIC_INDEX[metric]
        for i, name in enumerate(run.layer_names):
            if name in metadata.PSEUDO_LAYERS:
                continue
            points = {int(s): float(run.stats[k, i, j]) for k, s in enumerate(run.steps)
                      if s % every == 0 and np.isfinite(run.stats[k, i, j])}
            if points:
                out[metadata.layer_scalar_tag(metric, name)] = points
    return out


def check(logdir, every: int) -> None:
    got, want = scalars(logdir), expected(logdir, every)
    (run,) = read_logdir(logdir)
    # Every module row with parameters (the ReLUs have no gradient norm).
    modules = [layer["name"] for layer in run.layers if layer["type"] == "Linear"]
    assert len(modules) == 3 and sorted(t for t in want if t.startswith(FAMILIES[0])) == sorted(
        metadata.layer_scalar_tag("grad_norm", n) for n in modules)
    assert any(t.startswith(FAMILIES[1]) for t in want)  # (update steps 0..4, 10, 20)
    assert got.keys() == want.keys()
    for tag in want:
        assert got[tag].keys() == want[tag].keys(), tag
        np.testing.assert_array_equal(np.float32(list(got[tag].values())), np.float32(list(want[tag].values())))


def test_off_by_default_writes_no_layer_scalars(tmp_path):
    assert WatchConfig().layer_scalars_every == 0
    train(tmp_path)
    assert scalars(tmp_path) == {}


def test_every_module_row_at_the_stride_equals_the_rows(tmp_path):
    train(tmp_path, layer_scalars_every=3)
    check(tmp_path, 3)
    grad = scalars(tmp_path)[metadata.layer_scalar_tag("grad_norm", "0")]
    assert sorted(grad) == list(range(0, 30, 3))


@pytest.mark.parametrize("bad", [-1, 1.5, "10"])
def test_layer_scalars_every_is_validated(bad):
    with pytest.raises(ValueError, match="layer_scalars_every"):
        WatchConfig(layer_scalars_every=bad)


def test_the_tab_and_the_report_are_unaffected(tmp_path):
    from tests.test_plugin_wsgi import BASE, App

    train(tmp_path / "off")
    train(tmp_path / "on", layer_scalars_every=2)
    off, on = sorted(read_logdir(tmp_path), key=lambda r: r.name)
    assert (off.name, on.name) == ("off", "on")
    assert off.layer_names == on.layer_names and not off.warnings and not on.warnings
    np.testing.assert_array_equal(off.steps, on.steps)
    np.testing.assert_array_equal(off.stats, on.stats)
    assert run_report("r", off.diagnosis, off.events) == run_report("r", on.diagnosis, on.events)
    app = App(tmp_path)

    def tab(path, run):
        got = app.json(f"{BASE}/{path}run={run}")
        return {k: v for k, v in got.items() if k != "run"} if isinstance(got, dict) else got

    for path in ("heatmap?metric=grad_norm&", "heatmap?metric=update_ratio&", "events?", "layer?layer=2&"):
        assert tab(path, "off") == tab(path, "on"), path


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="the worker process needs a POSIX system")
def test_process_mode_writes_the_same(tmp_path):
    train(tmp_path / "thread", layer_scalars_every=3)
    train(tmp_path / "process", layer_scalars_every=3, analysis="process")
    check(tmp_path / "process", 3)
    assert scalars(tmp_path / "process") == scalars(tmp_path / "thread")
