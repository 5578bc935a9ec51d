"""The C++ gradient reader (training/grad_reader.py, grads.cpp): the same
addresses, sizes, identities and versions as Python reads, the same rows
from a watched run, and Python's reading wherever it is not there."""

import os
import shutil
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from tb_neuraldbg.training import cpu_kernel as K
from tb_neuraldbg.training import grad_reader
from tb_neuraldbg.training import stats as S
from tb_neuraldbg.training.instrument import _FAST_KEYS
from tb_neuraldbg.training.optimizer_facts import StepFacts
from tests.test_cpu_kernel import assert_built_once, failing_compiler, run_python
from tests.test_instrument import Recorder, batches, mlp


@pytest.fixture(scope="module")
def reader():
    if not grad_reader.wait(600):
        pytest.skip("the C++ gradient reader cannot be built here (no compiler or no torch headers)")
    return grad_reader


def _param(shape, grad=None):
    p = nn.Parameter(torch.zeros(shape, dtype=torch.float32 if grad is None else grad.dtype))
    p.grad = grad
    return p


def test_the_reader_reads_what_python_reads(reader):
    ok = [_param((3, 4), torch.randn(3, 4)), _param(5), _param(7, torch.randn(7)), _param(0, torch.zeros(0))]
    r = reader.read(ok)
    assert r.status.tolist() == [reader.OK, reader.NONE, reader.OK, reader.OK]
    for p, ptr, n, st in zip(ok, r.ptrs, r.lens, r.status):
        if st == reader.OK:
            assert (int(ptr), int(n)) == (p.grad.data_ptr(), p.grad.numel())
    norms = K.norms_at(r.ptrs[r.status == reader.OK], r.lens[r.status == reader.OK])
    assert torch.equal(norms, S.stacked_norms([p.grad for p in ok if p.grad is not None]))
    # A dense one in another memory order (transposed, channels_last) is read as it lies.
    dense = [_param((4, 3), torch.randn(3, 4).t()), _param((2, 3, 4, 4), torch.randn(2, 3, 4, 4).to(
        memory_format=torch.channels_last))]
    r = reader.read(ok + dense)
    assert r.status.tolist()[4:] == [reader.OK, reader.OK]
    assert [(int(a), int(n)) for a, n in zip(r.ptrs[4:], r.lens[4:])] == [(p.grad.data_ptr(), p.grad.numel())
                                                                         for p in dense]
    # Any gradient it does not take sends the whole step to Python.
    needs_graph = torch.randn(4, requires_grad=True) * 2.0  # (create_graph=True leaves such gradients)
    for odd in (torch.ones(3, 8)[:, ::2], torch.ones(4, dtype=torch.float64), needs_graph, torch.ones(4).to_sparse()):
        p = _param(tuple(odd.shape), odd.detach() if odd.is_sparse else odd)
        if odd.requires_grad:
            p.grad = odd  # (the setter keeps requires_grad)
            assert p.grad.requires_grad
        assert reader.read(ok + [p]) is None, odd


def test_a_reading_holds_the_gradients_until_it_is_dropped(reader):
    p = _param(8, torch.randn(8))
    g = p.grad
    before = g._use_count()
    r = reader.read([p])
    assert g._use_count() == before + 1  # still alive if the training drops p.grad now
    p.grad = None
    assert g._use_count() == before
    del r
    assert g._use_count() == before - 1


def test_the_weights_norms_are_read_by_the_reader(reader, monkeypatch):
    model = mlp()
    weights = list(model.parameters())
    want = S.stacked_norms(weights)
    r = reader.read_data(weights)
    assert r.status.tolist() == [reader.OK] * len(weights)
    assert [int(p) for p in r.ptrs] == [w.data_ptr() for w in weights]
    monkeypatch.setattr(K, "norms", lambda tensors: pytest.fail("read in Python"))
    assert torch.equal(S.stacked_norms(weights), want)
    assert torch.allclose(want, torch.stack(S.foreach_norm(weights)), rtol=1e-6)
    assert reader.read_data(weights + [torch.ones(2, dtype=torch.float64)]) is None
    assert reader.read_data(weights + [torch.ones(3, 4)[:, ::2]]) is None  # (not dense)
    assert reader.read_data(weights + [torch.ones(3).as_subclass(_Subclass)]) is None


class _Subclass(torch.Tensor):
    """A tensor subclass: its data may mean something else."""


def test_marks_tell_the_same_gradient_and_its_version(reader):
    a, b, c = _param(3, torch.zeros(3)), _param(3), _param(2, torch.ones(2))
    ids, versions = reader.marks([a, b, c])
    assert ids[0] and ids[2] and ids[0] != ids[2] and ids[1] == 0 and versions[1] == -1
    again = reader.marks([a, b, c])
    assert np.array_equal(again[0], ids) and np.array_equal(again[1], versions)
    a.grad.add_(1.0)  # modified in place: a new version
    c.grad = torch.ones(2)  # another tensor
    ids2, versions2 = reader.marks([a, b, c])
    assert ids2[0] == ids[0] and versions2[0] == versions[0] + 1 and ids2[2] != ids[2]


def test_a_frozen_parameter_is_seen_by_the_reader(reader):
    ps = [_param(2), _param(3)]
    assert reader.all_require_grad(ps) is True
    ps[1].requires_grad_(False)
    assert reader.all_require_grad(ps) is False


def test_marks_taken_in_python_are_checked_in_python_once_the_reader_is_loaded(reader, monkeypatch):
    """The reader loads in the background, maybe between a step's commit
    and the next backward: a leftover gradient is still found."""

    class Col:
        def __init__(self):
            self.rows = []
            self.c_arrays = []

        def add_many(self, values, rows, key):
            self.rows += rows

    p = _param(3, torch.ones(3))
    facts = StepFacts(None)
    monkeypatch.setattr(grad_reader, "_module", None)
    facts.commit(Col(), [p], [1])
    monkeypatch.undo()
    assert grad_reader._module is not None
    col = Col()
    facts.before_backward(col, [p], [1])
    facts.commit(col, [p], [1])  # (what was carried is recorded at the step; marks by the reader now)
    assert col.rows == [1]  # never zeroed: carried
    p.grad.zero_()  # zero_grad(set_to_none=False): the same tensor, a new version
    col = Col()
    facts.before_backward(col, [p], [1])
    facts.commit(col, [p], [1])
    assert col.rows == []
    p.grad = None
    p.grad = torch.ones(3)  # a new gradient
    col = Col()
    facts.before_backward(col, [p], [1], fresh=p)
    facts.commit(col, [p], [1])
    assert col.rows == []


def _run(model_fn, steps=6, poison_at=None, freeze_at=None, histograms=None, **cfg):
    """A watched run's rows; ``histograms`` (a list) gets each step's
    histogram values and their rows, in the packet's order."""
    torch.manual_seed(0)
    model = model_fn()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    crit = nn.CrossEntropyLoss()
    rec = Recorder(model, opt, crit, stats_every=2, **cfg)
    make = batches((16, 12), 4)
    for step in range(steps):
        opt.zero_grad()
        x, y = make()
        if step == freeze_at:
            model[2].requires_grad_(False)
        out = model(x)
        if step == poison_at:
            out = out * torch.tensor(float("nan"))
        crit(out, y).backward()
        opt.step()
    rec.inst.remove()
    for p in rec.packets if histograms is not None else ():
        m = p.keys == S.Key.HIST
        histograms.append((p.rows[m], p.host_values()[m]))
    return np.stack([rec.row(i) for i in range(steps)])


class _Unused(nn.Module):
    """An MLP with a layer that gets no gradient (its output is unused)."""

    def __init__(self):
        super().__init__()
        self.body = mlp()
        self.spare = nn.Linear(12, 3)

    def __getitem__(self, i):
        return self.body[i]

    def forward(self, x):
        self.spare(x)
        return self.body(x)


class _BFloat16(nn.Module):
    """The MLP cast to bfloat16: its gradients are bfloat16 (status BF16)."""

    dtype = torch.bfloat16

    def __init__(self):
        super().__init__()
        self.body = mlp().to(self.dtype)

    def __getitem__(self, i):
        return self.body[i]

    def forward(self, x):
        return self.body(x.to(self.dtype)).float()


class _Float16(_BFloat16):
    """The MLP cast to float16 (status F16)."""

    dtype = torch.float16


@pytest.mark.parametrize(
    "model_fn, kw",
    [(mlp, {}), (mlp, {"poison_at": 3}), (mlp, {"freeze_at": 2}), (_Unused, {}),
     (mlp, {"nonfinite": "every_step"}), (_BFloat16, {}), (_BFloat16, {"poison_at": 3, "freeze_at": 2}),
     (_Float16, {"poison_at": 3})],
    ids=["healthy", "nan-gradients", "frozen-row", "unused-layer", "every-step", "bfloat16", "bfloat16-nan-frozen",
         "float16-nan"],
)
def test_a_watched_run_has_the_same_rows_with_the_reader_and_in_python(reader, model_fn, kw, monkeypatch):
    cfg = {k: v for k, v in kw.items() if k == "nonfinite"}
    run = {k: v for k, v in kw.items() if k != "nonfinite"}
    with_reader = _run(model_fn, **run, **cfg)
    monkeypatch.setattr(grad_reader, "_module", None)
    in_python = _run(model_fn, **run, **cfg)
    assert with_reader.shape == in_python.shape
    same = (with_reader == in_python) | (np.isnan(with_reader) & np.isnan(in_python))
    assert same.all(), np.argwhere(~same)[:5]
    if run.get("poison_at") is not None:
        assert not np.isfinite(with_reader[run["poison_at"]]).all()


def test_the_reader_is_used_by_a_watched_step(reader, monkeypatch):
    calls = []
    real = grad_reader.read
    monkeypatch.setattr(grad_reader, "read", lambda params: calls.append(len(params)) or real(params))
    rows = _run(mlp, steps=2)
    assert calls == [6, 6] and np.isfinite(rows).any()


# -- a module's input and output read in one call (measure_fn) ---------------


def _moments_in_order(x, x_batched, y, y_dead, exact, bounds=None):
    """measure_fn()'s values, built from cpu_kernel.moments and
    stats.saturated as documented (``bounds``: a bounded activation's
    ``(lo, hi)``)."""
    vals = []
    if x is not None:
        units = x.numel() // x.shape[0] if x_batched else 0
        m = K.moments(x, units)
        vals += [x.numel()] + ([units] if x_batched else []) + [m[2], m[4]]
        vals += ([m[6]] if x_batched else []) + ([m[5]] if exact else [])
    units = y.numel() // y.shape[0] if y_dead else 0
    m = K.moments(y, units)
    vals += [y.numel()] + ([units] if y_dead else []) + m[:5] + ([m[6]] if y_dead else []) + ([m[5]] if exact else [])
    return vals + ([float(S.saturated(y, *bounds))] if bounds is not None else [])


def _same(a, b):
    return len(a) == len(b) and all(u == v or (u != u and v != v) for u, v in zip(a, b))


@pytest.mark.parametrize("x_batched, y_dead, exact, bounds", [
    (False, False, False, None), (True, True, True, None), (True, False, True, None), (False, True, False, None),
    (True, False, False, (-0.99, 0.99)), (False, True, True, (None, 1.5)), (True, False, True, (0.01, 0.99)),
])
def test_measure_gives_the_kernels_moments_in_the_collectors_order(reader, x_batched, y_dead, exact, bounds):
    measure = reader.measure_fn()
    assert measure is not None
    sat = None if bounds is None else K.saturation_bounds(*bounds)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 5, 6, generator=g).relu()
    x[:, 2] = 0.0  # dead units of the input
    y = torch.randn(8, 30, generator=g)
    y[3, 7] = float("nan")
    y[5, 1] = float("inf")
    for xx in (x, None):
        got = measure(xx, x_batched and xx is not None, y, y_dead, exact, sat)
        assert _same(list(got), _moments_in_order(xx, x_batched and xx is not None, y, y_dead, exact, bounds)), got
    large = torch.randn(4, 1 << 16, generator=g)  # (read without the GIL held: grads.cpp's kReleaseGil)
    got = measure(x, x_batched, large, y_dead, exact, sat)
    assert _same(list(got), _moments_in_order(x, x_batched, large, y_dead, exact, bounds)), got
    if bounds is not None:
        assert 0 < got[-1] < large.numel()  # (a count that can be wrong both ways)
    assert len(measure(x, x_batched, y, y_dead, exact, sat)) == len(_FAST_KEYS[True, x_batched, y_dead, exact,
                                                                               sat is not None])
    assert len(measure(None, False, y, y_dead, exact, sat)) == len(_FAST_KEYS[False, False, y_dead, exact,
                                                                              sat is not None])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_measure_reads_16_bit_activations(reader, dtype):
    # A CPU autocast's layers output bfloat16 or float16: read by the kernel
    # as the floats they hold, their saturated values as torch's ops count
    # them (bounds that are not the type's own values among them).
    measure = reader.measure_fn()
    g = torch.Generator().manual_seed(5)
    x = torch.randn(8, 40, generator=g).relu().to(dtype)
    y = (torch.randn(8, 40, generator=g) * 3).tanh().to(dtype)
    y[:, 4] = 0.0
    for lo, hi in [(-0.99, 0.99), (-0.3, 0.77), (None, 0.83)]:
        sat = K.saturation_bounds(lo, hi)
        got = measure(x, True, y, True, True, sat)
        assert got is not None and _same(list(got), _moments_in_order(x, True, y, True, True, (lo, hi)))
        assert got[-1] == float(S.saturated(y, lo, hi)) > 0
    assert measure(None, False, y.double(), False, False, None) is None  # (float64: torch's ops)


def test_measure_reads_a_channels_last_batch_as_its_contiguous_copy(reader):
    # A CNN in channels_last (PyTorch's advice for CNNs on CPUs): its
    # activations lie channel-innermost. Every value of the row, dead units
    # included, must be the contiguous copy's.
    measure = reader.measure_fn()
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 5, 7, 3, generator=g)
    x[x.abs() < 0.3] = 0.0  # (zeros, none dead by chance)
    x[:, 2] = 0.0  # a dead channel
    x[:, :, 3, 1] = 0.0  # a dead place in every channel
    last = x.to(memory_format=torch.channels_last)
    y = torch.randn(6, 5, 7, 3, generator=g).tanh().to(memory_format=torch.channels_last)
    assert not last.is_contiguous() and not y.is_contiguous()
    bounds = K.saturation_bounds(-0.5, 0.5)
    got = measure(last, True, y, True, True, bounds)
    want = measure(x, True, y.contiguous(), True, True, bounds)
    keys = _FAST_KEYS[True, True, True, True, True]
    assert got is not None and len(got) == len(keys) == len(want)
    sums = {S.Key.IN_SUM, S.Key.OUT_SUM, S.Key.OUT_NORM}  # (added in another order)
    assert [v for k, v in zip(keys, got) if k not in sums] == [v for k, v in zip(keys, want) if k not in sums]
    assert got == pytest.approx(want, rel=1e-6)
    dead = got[keys.index(S.Key.IN_DEAD)]
    assert dead == 7 * 3 + 4 * 1 == float(S.zero_and_dead(x)[1])  # channel 2's places, and place (3, 1) of the rest
    assert got[keys.index(S.Key.OUT_SAT)] == float(S.saturated(y, -0.5, 0.5)) > 0


def test_measure_leaves_what_the_kernel_does_not_take_to_python(reader):
    measure = reader.measure_fn()
    y = torch.randn(4, 3)

    class Sub(torch.Tensor):
        pass

    refused = [torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 6)[:, ::2], y.as_subclass(Sub),
               torch.zeros(0, 3), torch.randn(4, 3).to(torch.complex64), torch._neg_view(y)]
    for t in refused:
        assert measure(t, False, y, False, False, None) is None
        assert measure(None, False, t, False, False, None) is None
        assert measure(None, False, t, False, False, (0.0, 0.99, -1.0)) is None
    assert measure(None, False, torch.ones(1, 1), False, False, None) is None  # one value: no spread
    assert measure(y[:, :1].reshape(4), False, y, False, False, None) is None  # (a view 3 values apart)
    assert measure(y[:, :1].contiguous().reshape(4), False, y, False, False, None) is not None
    # Dense in another memory order: the same values in another order, as a
    # batch only where each sample's values are a block of their own.
    t = torch.randn(3, 4).t()
    assert measure(None, False, t, False, False, None) is not None
    assert measure(None, False, t, True, False, None) is None and measure(t, True, y, False, False, None) is None
    K.set_enabled(False)
    try:
        assert reader.measure_fn() is None
    finally:
        K.set_enabled(True)


def test_a_measure_that_fails_its_check_is_not_used(reader, monkeypatch):
    real = reader._measure
    off_by_one = lambda *a: None if real(*a) is None else tuple(v + 1.0 for v in real(*a))  # noqa: E731
    with pytest.raises(RuntimeError, match="check failed"):
        grad_reader._check_measure(off_by_one)
    reads_anything = lambda *a: real(*a) or (0.0,) * 8  # noqa: E731
    with pytest.raises(RuntimeError, match="does not take"):
        grad_reader._check_measure(reads_anything)
    grad_reader._check_measure(real)  # (the real one passes)

    def failing(measure):
        raise RuntimeError("check failed")

    monkeypatch.setattr(grad_reader, "_check_measure", failing)
    monkeypatch.setattr(grad_reader, "_module", None)
    monkeypatch.setattr(grad_reader, "_measure", None)
    grad_reader._load()
    assert grad_reader._module is not None  # the gradients are still read in C++
    assert grad_reader.measure_fn() is None  # the activations through ctypes


class _Mixed(nn.Module):
    """What the one-call path takes and what it leaves to the Python path in
    one model: a LayerNorm, GELU, an in-place ReLU, a Tanh (saturation), a
    conv on 4-d activations, an output of one value per sample."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(12)
        self.up = nn.Linear(12, 16)
        self.act = nn.GELU()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.tanh = nn.Tanh()
        self.one = nn.Linear(32, 1)
        self.head = nn.Linear(33, 4)

    def __getitem__(self, i):
        return self.up

    def forward(self, x):
        h = self.act(self.up(self.norm(x)))
        c = self.relu(self.conv(h.view(-1, 1, 4, 4))).flatten(1)
        t = self.tanh(c)
        return self.head(torch.cat([t, self.one(t)], 1))


@pytest.mark.parametrize("model_fn, kw", [(mlp, {}), (_Mixed, {}), (_Mixed, {"poison_at": 3}),
                                          (_Mixed, {"hist_every": 2}), (_Mixed, {"hist_every": 1, "poison_at": 2}),
                                          (_Mixed, {"nonfinite": "every_step"})],
                         ids=["mlp", "mixed", "mixed-nan", "mixed-histograms", "mixed-histograms-nan",
                              "mixed-every-step"])
def test_the_one_call_measure_gives_the_rows_of_the_python_path(reader, model_fn, kw, monkeypatch):
    calls = []
    real = reader._measure
    monkeypatch.setattr(reader, "_measure", lambda *a: calls.append(a[2].shape) or real(*a))
    hists = []
    one_call = _run(model_fn, histograms=hists, **kw)
    assert calls  # (used)
    monkeypatch.setattr(reader, "_measure", None)
    hists_before = []
    before = _run(model_fn, histograms=hists_before, **kw)
    same = (one_call == before) | (np.isnan(one_call) & np.isnan(before))
    assert same.all(), np.argwhere(~same)[:5]
    # the same histograms (bins, min, max, sum, sum of squares) of the same rows
    assert len(hists) == len(hists_before)
    for (rows, vals), (rows0, vals0) in zip(hists, hists_before):
        assert np.array_equal(rows, rows0)
        assert np.array_equal(vals, vals0, equal_nan=True)
    assert any(len(v) for _, v in hists)  # (the first step is a histogram step)


def test_a_measure_that_raises_sends_the_module_the_old_way(reader, monkeypatch):
    def raising(*a):
        raise RuntimeError("a question PyTorch refuses for an exotic tensor")

    monkeypatch.setattr(reader, "_measure", raising)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no part of the monitoring switched off)
        rows = _run(_Mixed)
    monkeypatch.setattr(reader, "_measure", None)
    before = _run(_Mixed)
    assert ((rows == before) | (np.isnan(rows) & np.isnan(before))).all()
    assert np.isfinite(rows).any()


def _reader_in(env: dict) -> str:
    return run_python("from tb_neuraldbg.training import grad_reader\nprint(grad_reader.wait(600))\n", env, 900)


def test_without_a_cxx_compiler_python_reads_the_gradients(tmp_path):
    fake = failing_compiler(tmp_path, "c++")
    assert _reader_in({"CXX": fake, "XDG_CACHE_HOME": str(tmp_path / "cache")}) == "False"
    assert not list((tmp_path / "cache").rglob("*.so"))  # nothing half-built left behind (the build's lock stays)
    assert _reader_in({K.ENV: "0", "XDG_CACHE_HOME": str(tmp_path / "cache2")}) == "False"


@pytest.mark.skipif(shutil.which("c++") is None and not os.environ.get("CXX"), reason="no C++ compiler")
def test_the_reader_is_built_once_into_the_private_cache(tmp_path, reader):
    assert_built_once(_reader_in, tmp_path / "cache", "grads-*.so", "True")
