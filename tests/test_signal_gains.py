"""What a module does to the signal (``fwd_gain``, ``bwd_gain``) and whether
its units differ (``unit_spread``), as the writer records them on full steps
(docs/FORMAT.md): known modules give their known values, the first layer has
no backward gain, an in-place ReLU, a tuple output and AMP are measured
without changing training."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from tb_neuraldbg import DebugWriter, metadata
from tb_neuraldbg.offline.reader import read_run
from tb_neuraldbg.training.step import slots as S
from tb_neuraldbg.training.step.slots import Key

torch.set_num_threads(1)
M = metadata.METRIC_INDEX


class Times1000(torch.autograd.Function):
    """Identity forward; the gradient it passes back is 1000 times the one it gets."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * 1000.0


class Amplify(nn.Module):
    """A module without parameters around :class:`Times1000`."""

    def forward(self, x):
        return Times1000.apply(x)


class SameUnits(nn.Module):
    """A Linear whose output units are all the same (its rows are equal)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.lin = nn.Linear(n_in, n_out)
        with torch.no_grad():
            self.lin.weight.copy_(torch.randn(1, n_in).expand(n_out, n_in) / math.sqrt(n_in))
            self.lin.bias.fill_(0.1)

    def forward(self, x):
        return self.lin(x)


def _orthogonal(n, scale=1.0):
    lin = nn.Linear(n, n, bias=False)
    nn.init.orthogonal_(lin.weight)
    with torch.no_grad():
        lin.weight.mul_(scale)
    return lin


def _train(tmp_path, model, steps=1, batch=256, n_in=64, classes=8, **watch):
    """``steps`` SGD steps on random data; the run's stats ``[S, L, M]`` and its layer names."""
    torch.manual_seed(1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with DebugWriter(str(tmp_path)) as w:
        w.watch(model, optimizer=opt, criterion=nn.CrossEntropyLoss(), **watch)
        for _ in range(steps):
            x, t = torch.randn(batch, n_in), torch.randint(0, classes, (batch,))
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), t).backward()
            opt.step()
    run = read_run(str(tmp_path))
    return run.stats, list(run.layer_names)


def _at(stats, names, layer, metric, step=0):
    return float(stats[step, names.index(layer), M[metric]])


def test_a_linear_scaled_x20_has_a_forward_gain_of_20(tmp_path):
    model = nn.Sequential(_orthogonal(64), _orthogonal(64, 20.0), nn.Linear(64, 8))
    stats, names = _train(tmp_path, model)
    assert _at(stats, names, "0", "fwd_gain") == pytest.approx(1.0, rel=0.1)
    assert _at(stats, names, "1", "fwd_gain") == pytest.approx(20.0, rel=0.1)
    # an orthogonal square map keeps the gradient's norm, scaled by its scale
    assert _at(stats, names, "1", "bwd_gain") == pytest.approx(20.0, rel=0.1)


def test_a_function_whose_backward_multiplies_by_1000_has_a_backward_gain_of_1000(tmp_path):
    model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), Amplify(), nn.Linear(64, 8))
    stats, names = _train(tmp_path, model)
    assert _at(stats, names, "2", "bwd_gain") == pytest.approx(1000.0, rel=1e-3)
    # what it passes back is what the Tanh before it receives
    passed = _at(stats, names, "2", "bwd_gain") * _at(stats, names, "2", "gout_norm")
    assert _at(stats, names, "1", "gout_norm") == pytest.approx(passed, rel=1e-4)
    assert _at(stats, names, "2", "fwd_gain") == pytest.approx(1.0, rel=1e-4)
    assert 0.05 < _at(stats, names, "1", "bwd_gain") <= 1.0  # tanh' <= 1
    assert 0.05 < _at(stats, names, "3", "bwd_gain") < 5.0


def test_the_first_layer_without_input_gradient_has_no_backward_gain(tmp_path):
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    stats, names = _train(tmp_path, model)
    assert math.isnan(_at(stats, names, "0", "bwd_gain"))  # absent, not 0
    assert math.isfinite(_at(stats, names, "0", "fwd_gain"))
    assert all(math.isfinite(_at(stats, names, layer, "bwd_gain")) for layer in ("1", "2"))
    for pseudo in metadata.PSEUDO_LAYERS:
        assert np.isnan(stats[0, names.index(pseudo), [M["fwd_gain"], M["bwd_gain"], M["unit_spread"]]]).all()


def _inplace_model():
    torch.manual_seed(0)
    return nn.Sequential(_orthogonal(64), nn.ReLU(inplace=True), nn.Linear(64, 8))


def test_an_inplace_relu_is_measured_before_it_overwrites_its_input(tmp_path):
    stats, names = _train(tmp_path, _inplace_model())
    # Gaussian input: std(relu(x)) / std(x) = sqrt(1/2 - 1/(2 pi)); about half
    # the gradient's entries pass (norm ratio about sqrt(1/2)).
    assert _at(stats, names, "1", "fwd_gain") == pytest.approx(math.sqrt(0.5 - 0.5 / math.pi), rel=0.1)
    assert _at(stats, names, "1", "bwd_gain") == pytest.approx(math.sqrt(0.5), rel=0.15)


def test_an_inplace_relu_trains_as_an_unwatched_one(tmp_path):
    def weights(watched):
        model = _inplace_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        torch.manual_seed(2)
        w = DebugWriter(str(tmp_path / str(watched))) if watched else None
        if w:
            w.watch(model, optimizer=opt, criterion=nn.CrossEntropyLoss(), stats_every=1)
        for _ in range(3):
            x, t = torch.randn(32, 64), torch.randint(0, 8, (32,))
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), t).backward()
            opt.step()
        if w:
            w.close()
        return [p.detach().clone() for p in model.parameters()]

    for a, b in zip(weights(True), weights(False)):
        assert torch.equal(a, b)


def test_units_all_the_same_have_a_spread_near_zero(tmp_path):
    model = nn.Sequential(SameUnits(64, 32), nn.Tanh(), nn.Linear(32, 8))
    stats, names = _train(tmp_path, model)
    assert _at(stats, names, "0.lin", "unit_spread") < 1e-3
    assert _at(stats, names, "1", "unit_spread") < 1e-3  # tanh of equal units: equal
    assert _at(stats, names, "2", "unit_spread") > 0.3  # distinct weight rows: distinct units again


def test_unit_spread_is_its_documented_definition(tmp_path):
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(64, 16), nn.Sigmoid(), nn.Linear(16, 8))
    outputs = {}

    def keep(module, args, y):
        outputs.setdefault("y", y.detach().double().numpy().copy())

    model[1].register_forward_hook(keep)
    stats, names = _train(tmp_path, model)
    y = outputs["y"]
    within = ((y - y.mean(axis=1, keepdims=True)) ** 2).sum()
    total = ((y - y.mean()) ** 2).sum()
    assert _at(stats, names, "1", "unit_spread") == pytest.approx(math.sqrt(within / total), rel=1e-3)


def test_units_of_a_conv_map_are_its_channels(tmp_path):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            with torch.no_grad():  # every output channel the same filter
                self.conv.weight.copy_(self.conv.weight[:1].expand_as(self.conv.weight))
                self.conv.bias.zero_()
            self.head = nn.Linear(4 * 8 * 8, 8)

        def forward(self, x):
            return self.head(self.conv(x.view(-1, 3, 8, 8)).flatten(1))

    stats, names = _train(tmp_path, Net(), n_in=3 * 8 * 8)
    assert _at(stats, names, "conv", "unit_spread") < 1e-3
    assert _at(stats, names, "head", "unit_spread") > 0.3


def test_a_tuple_output_and_its_consumer_are_measured(tmp_path):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(8, 16, batch_first=True)
            self.head = nn.Linear(16, 8)

        def forward(self, x):
            out, _ = self.lstm(x.view(-1, 8, 8))
            return self.head(out[:, -1])

    stats, names = _train(tmp_path, Net())
    for layer in ("lstm", "head"):
        assert math.isfinite(_at(stats, names, layer, "fwd_gain"))
        assert 0.0 < _at(stats, names, layer, "unit_spread") <= 1.0
    assert math.isfinite(_at(stats, names, "head", "bwd_gain"))  # (its input, out[:, -1], a view: hooked)


def test_cheap_steps_have_no_gains(tmp_path):
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    stats, names = _train(tmp_path, model, steps=5, stats_every=3)  # full: steps 0-3; cheap: 4
    cols = [M["fwd_gain"], M["bwd_gain"], M["unit_spread"]]
    assert np.isfinite(stats[3, names.index("2")][cols]).all()
    assert np.isnan(stats[4][:, cols]).all()


@pytest.mark.skipif(not hasattr(torch, "autocast"), reason="no autocast")
def test_bfloat16_autocast_gains(tmp_path):
    model = nn.Sequential(_orthogonal(64), nn.Tanh(), _orthogonal(64, 20.0), nn.Linear(64, 8))
    torch.manual_seed(1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with DebugWriter(str(tmp_path)) as w:
        w.watch(model, optimizer=opt, criterion=nn.CrossEntropyLoss())
        x, t = torch.randn(256, 64), torch.randint(0, 8, (256,))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), t)
        loss.backward()
        opt.step()
    run = read_run(str(tmp_path))
    names = list(run.layer_names)
    assert _at(run.stats, names, "2", "fwd_gain") == pytest.approx(20.0, rel=0.1)
    assert _at(run.stats, names, "2", "bwd_gain") == pytest.approx(20.0, rel=0.1)


def test_assembled_gains_follow_the_input_reference():
    """Row 2's input is row 1's output: its input std is row 1's act_std, the
    gradient it passes back is row 1's output gradient."""
    rows, keys, vals = [], [], []

    def put(r, k, v):
        rows.append(r), keys.append(k), vals.append(v)

    # row 1: 4 values [1, 2, 3, 4]; row 2: its output [2, 4, 6, 8]
    for r, xs in ((1, [1.0, 2.0, 3.0, 4.0]), (2, [2.0, 4.0, 6.0, 8.0])):
        put(r, Key.OUT_N, 4), put(r, Key.OUT_SUM, sum(xs)), put(r, Key.OUT_NORM, math.sqrt(sum(v * v for v in xs)))
        put(r, Key.OUT_MIN, min(xs)), put(r, Key.OUT_MAX, max(xs)), put(r, Key.OUT_NZ, 4)
    put(2, Key.IN_REF, 1)
    put(1, Key.GOUT_NORM, 6.0), put(2, Key.GOUT_NORM, 2.0)
    # row 1 measured its own input: [0, 0, 1, 1] (std 0.577...)
    put(1, Key.IN_SUM, 2.0), put(1, Key.IN_NORM, math.sqrt(2.0)), put(1, Key.IN_N, 4), put(1, Key.GIN_NORM, 3.0)
    row = S.assemble(np.array(vals, dtype=float), np.array(rows), np.array(keys), 3)
    assert row[2, M["fwd_gain"]] == pytest.approx(2.0)
    assert row[2, M["bwd_gain"]] == pytest.approx(3.0)
    assert row[2, M["gout_norm"]] == pytest.approx(2.0)
    assert row[1, M["fwd_gain"]] == pytest.approx(np.std([1, 2, 3, 4], ddof=1) / np.std([0, 0, 1, 1], ddof=1))
    assert row[1, M["bwd_gain"]] == pytest.approx(0.5)
    assert np.isnan(row[0, [M["fwd_gain"], M["bwd_gain"], M["unit_spread"]]]).all()
