"""The fused CPU statistics (training/cpu_kernel.py, moments.c): the same
values as torch's ops, the same rows and diagnosis inputs from a watched
run, and torch's ops wherever the kernel is not there."""

import math
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from torch import nn

from tb_neuraldbg import metadata
from tb_neuraldbg.training import cpu_kernel as K
from tb_neuraldbg.training import grad_reader, kernel_build
from tb_neuraldbg.training import stats as S
from tb_neuraldbg.training.collector import Collector, all_finite
from tests.test_instrument import CNN, FunctionalMLP, LSTMNet, Recorder, batches, mlp

needs_kernel = pytest.mark.skipif(shutil.which("cc") is None and not os.environ.get("CC"), reason="no C compiler")


def torch_moments(x: torch.Tensor, units: int) -> list[float]:
    """What the hooks take with torch's ops, in the kernel's order."""
    vals = [v.item() for v in S.moments(x, dead=units > 0)]
    dead = vals.pop() if units else -1.0
    return vals + [float(S.nonfinite_count(x).item()), float(dead)]


def relu_batch(shape, dead_units=(), seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.relu(torch.randn(shape, generator=g))
    flat = x.view(shape[0], -1)
    for j in dead_units:
        flat[:, j] = 0.0
    return x


@needs_kernel
@pytest.mark.parametrize(
    "shape, dead",
    [((1,), ()), ((7,), ()), ((4097,), ()), ((3, 4099), (0, 4098)), ((256, 1024), (5, 77, 1023)),
     ((4, 3, 5, 5), (0, 74)), ((2, 8192), (4095, 4096, 4097))],
)
def test_the_kernel_gives_torchs_statistics(shape, dead):
    assert K.available()
    x = relu_batch(shape, dead) - (0.25 if len(shape) == 1 else 0.0)  # negatives too where not batched
    units = x.numel() // x.shape[0] if x.dim() >= 2 else 0
    got, want = K.moments(x, units), torch_moments(x, units)
    assert got[0] == want[0] and got[1] == want[1]  # min, max: exact
    assert got[2] == pytest.approx(want[2], rel=1e-5, abs=1e-4)
    assert got[3] == pytest.approx(want[3], rel=1e-5)
    assert got[4:] == want[4:]  # counts: non-zeros, non-finite, dead units
    if units:
        assert got[6] >= len(dead)  # (and the units that are zero by chance in a small batch)


@needs_kernel
def test_non_finite_values_read_as_torchs_do():
    x = torch.ones(3, 5000)
    x[1, 7] = float("inf")
    got = K.moments(x, 5000)
    assert got[1] == math.inf and got[2] == math.inf and got[3] == math.inf and got[5] == 1
    x[2, 4999] = float("-inf")
    got, want = K.moments(x, 5000), torch_moments(x, 5000)
    assert got[0] == -math.inf and math.isnan(got[2]) and got[5] == 2 == want[5]
    x[0, 0] = float("nan")  # NaN: min and max are NaN (torch.aminmax), NaN counts as non-zero
    got, want = K.moments(x, 5000), torch_moments(x, 5000)
    assert all(math.isnan(v) for v in got[:4]) and all(math.isnan(v) for v in want[:4])
    assert got[4:] == want[4:] and got[5] == 3


@needs_kernel
@needs_kernel
@pytest.mark.parametrize("n, at", [(7, 6), (16, 15), (17, 16), (4097, 4096), (8200, 4095), (8200, 0)])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 3e38, -2e19, 0.0])
def test_non_finite_counts_are_exact_wherever_the_value_sits(n, at, value):
    # The pass counts no non-finite value itself: a NaN, an inf, or a sum of
    # squares that overflows sends it to an exact count. A finite value too
    # large to square is finite (counted 0) as torch counts it.
    x = torch.linspace(-1.0, 1.0, n)
    x[at] = value
    got, want = K.moments(x), torch_moments(x, 0)
    assert got[5] == want[5] == (0 if math.isfinite(value) else 1)
    assert got[4] == want[4]
    if math.isnan(value):
        assert math.isnan(got[0]) and math.isnan(got[1])
    else:
        assert got[0] == want[0] and got[1] == want[1]


def test_tensors_it_does_not_take_go_to_torchs_ops():
    x = torch.randn(16, 32)
    assert K.moments(x) is not None
    assert K.moments(x.t()) is None  # not contiguous (nor channels_last: the Python path's test)
    assert K.moments(x.double()) is None and K.moments(x.half()) is not None and K.moments(x.bfloat16()) is not None
    assert K.moments(nn.Parameter(x)) is None  # a subclass
    assert K.moments(torch.zeros(0)) is None
    assert K.moments(x, units=5) is None  # 5 does not divide 512
    assert K.moments(torch.zeros(K.MAX_ELEMENTS + 1)) is None
    K.set_enabled(False)
    try:
        assert K.moments(x) is None and not K.available()
    finally:
        K.set_enabled(True)


@needs_kernel
@pytest.mark.parametrize("shape", [(5,), (4097,), (256, 1024), (4, 3, 5, 5), (3_000_000,)])
def test_the_kernels_histogram_is_torchs(shape):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=g)
    x = torch.relu(x) if len(shape) > 1 else x  # zeros in one bin, and negatives
    stride = -(-x.numel() // S.HIST_MAX_VALUES)  # (a 3M-value tensor is subsampled: a strided view)
    sample = x.reshape(-1)[::stride].double()
    assert K.histogram(x.reshape(-1)[::stride], S.HIST_BINS) is not None
    fused = S.histogram(x)
    K.set_enabled(False)
    try:
        plain = S.histogram(x)
    finally:
        K.set_enabled(True)
    bins = S.HIST_BINS
    assert torch.equal(fused[: bins + 3], plain[: bins + 3])  # counts, non-finite, min, max: exact
    # The sums against float64 (torch's float32 dot of a strided view drifts: 5e-4 on 1M values).
    want = [sample.sum().item(), (sample * sample).sum().item()]
    np.testing.assert_allclose(fused[bins + 3 :].numpy(), want, rtol=2e-6, atol=1e-3)
    np.testing.assert_allclose(plain[bins + 3 :].numpy(), want, rtol=1e-3, atol=1e-3)


@needs_kernel
def test_a_histogram_with_non_finite_values_goes_to_torchs_general_path():
    x = torch.randn(1000)
    x[3] = float("nan")
    x[5] = float("inf")
    assert K.histogram(x, S.HIST_BINS) is None
    h = S.histogram(x)
    assert h[S.HIST_BINS] == 2 and h[: S.HIST_BINS].sum() == 998


@needs_kernel
def test_the_kernels_norms_of_many_tensors_are_torchs():
    g = torch.Generator().manual_seed(2)
    ts = [torch.randn(n, generator=g) * (i + 1) for i, n in enumerate((1, 3, 4095, 4096, 4097, 70_000))]
    ts += [torch.zeros(0), nn.Parameter(torch.randn(8, 8, generator=g)), torch.randn(6, 5, generator=g)[:, 1:].contiguous()]
    got = S.stacked_norms(ts)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32 and got.shape == (len(ts),)
    want = torch.stack([torch.linalg.vector_norm(t.detach().double()) for t in ts]).float()
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)


@needs_kernel
@pytest.mark.parametrize("threads, kernel", [(1, True), (K.NORMS_FEW_THREADS, True), (K.NORMS_FEW_THREADS + 2, False)])
def test_large_gradients_take_the_kernels_norms_only_with_few_threads(threads, kernel):
    # Above NORMS_MEAN_ELEMENTS a tensor on average, torch's norms on many
    # threads may read faster than the kernel's one thread: theirs then.
    ts = [torch.randn(K.NORMS_MEAN_ELEMENTS * 2), torch.randn(K.NORMS_MEAN_ELEMENTS + 1)]
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        got = K.norms(ts)
    finally:
        torch.set_num_threads(saved)
    assert (got is not None) == kernel
    if kernel:
        want = torch.stack([torch.linalg.vector_norm(t.double()) for t in ts]).float()
        torch.testing.assert_close(got, want, rtol=1e-6, atol=0)


@needs_kernel
def test_a_finite_gradient_too_large_to_square_in_float_has_a_finite_norm():
    # Exploding, not non-finite: the squares add up in double.
    ts = [torch.full((1000,), 1e20), torch.tensor([3e38, -3e38]), torch.tensor([1.0, math.inf]), torch.tensor([math.nan])]
    got = K.norms(ts).double()
    assert got[0].item() == pytest.approx(1e20 * math.sqrt(1000), rel=1e-6)
    assert got[1].item() == math.inf  # the norm itself is above float32's range
    assert got[2].item() == math.inf and math.isnan(got[3].item())


@needs_kernel
@pytest.mark.parametrize("threads", [1, 2])
def test_many_values_are_read_by_two_cores_with_the_same_norms(threads, monkeypatch):
    # The half-way value falls inside a tensor (read as two, joined after),
    # or between two; NaN, inf and a square beyond float32 on either side.
    g = torch.Generator().manual_seed(4)
    monkeypatch.setattr(K, "NORMS_SPLIT_ELEMENTS", 1000)
    calls = []
    real = K._norms_on_two_cores
    monkeypatch.setattr(K, "_norms_on_two_cores", lambda *a: calls.append(1) or real(*a))
    saved = torch.get_num_threads()
    assert K.available()  # (loaded first: its check at load reads in parts too)
    before = K.helper_seconds()
    cases = [
        [torch.randn(1501, generator=g)],
        [torch.randn(700, generator=g), torch.randn(300, generator=g), torch.randn(1000, generator=g)],
        [torch.randn(3, generator=g), torch.full((2000,), 1e20), torch.tensor([math.nan, 1.0])],
        [torch.randn(999, generator=g), torch.tensor([math.inf]), torch.randn(2500, generator=g) * 1e-22],
    ]
    try:
        torch.set_num_threads(threads)
        for ts in cases:
            got = K.norms(ts).double()
            want = torch.stack([torch.linalg.vector_norm(t.double()) for t in ts])
            torch.testing.assert_close(got, want, rtol=1e-6, atol=0, equal_nan=True)
    finally:
        torch.set_num_threads(saved)
    assert len(calls) == (len(cases) if threads > 1 else 0)  # (one core: one thread)
    # The second core's CPU time is counted (benchmarks add it to the writer's threads).
    assert (K.helper_seconds() > before) == (threads > 1)


needs_torchs_openmp = pytest.mark.skipif(
    "OpenMP" not in torch.__config__.parallel_info(), reason="torch without OpenMP: reads stay on one core"
)


@needs_kernel
@needs_torchs_openmp
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_large_read_in_parts_gives_what_one_read_gives(threads):
    # Parts of whole rows (batched) or whole blocks: a unit alive only in the
    # last row, dead units, a NaN or an inf in the last part, a read that is
    # not a whole number of blocks.
    assert K.reads_in_parts()  # this project's machines: torch's OpenMP is the kernel's
    rows, units = 12, K.PART_ELEMENTS // 4 + 3  # three parts' worth and a bit
    x = torch.randn(rows, units, generator=torch.Generator().manual_seed(5))  # (no unit dead by chance)
    x[:, [0, 7, units - 1]] = 0.0
    x[rows - 1, 0] = 2.0
    cases = [(x, units), (x.view(-1), 0), (x.view(-1)[: x.numel() - 5], 0)]
    for bad in (math.nan, math.inf):
        y = x.clone()
        y[rows - 1, units - 2] = bad
        cases += [(y, units), (y.view(-1), 0)]
    saved = torch.get_num_threads()
    before = K.helper_seconds()
    try:
        torch.set_num_threads(threads)
        for t, u in cases:
            parts = K.moments(t, u)
            K.set_reads_in_parts(False)
            try:
                one = K.moments(t, u)
            finally:
                K.set_reads_in_parts(True)
            want = torch_moments(t, u)
            assert parts[0:2] == one[0:2] == want[0:2] or all(map(math.isnan, parts[0:2] + one[0:2]))
            assert parts[4:] == one[4:] == want[4:]  # non-zeros, non-finite, dead units
            assert parts[2:4] == pytest.approx(one[2:4], rel=1e-12, nan_ok=True)  # (the sums, added in another order)
            if u:
                assert parts[6] == 2  # units 7 and units - 1: unit 0 lives in the last row only
    finally:
        torch.set_num_threads(saved)
    # Torch's other threads' CPU time is counted (benchmarks add it to the writer's threads).
    assert (K.helper_seconds() > before) == (threads > 1)


@needs_kernel
@needs_torchs_openmp
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_large_histograms_and_saturation_counts_in_parts_give_what_one_read_gives(threads):
    # Counts are whole numbers: in parts they must be the very counts of one
    # read, and those of torch's ops (K off).
    n = 3 * K.PART_ELEMENTS + 7
    x = torch.randn(n, generator=torch.Generator().manual_seed(6)) * 2
    x[n - 1] = 40.0  # (a far value in the last part: most bins empty, the top one its own)
    strided = torch.randn(2 * n, generator=torch.Generator().manual_seed(7))[::2]
    bounds = [(-0.99, 0.99), (None, 1.5), (0.01, 0.99)]
    saved = torch.get_num_threads()
    got = {}
    try:
        torch.set_num_threads(threads)
        for in_parts in (True, False):
            K.set_reads_in_parts(in_parts)
            m = K.moments(x)
            got[in_parts] = (
                K.histogram_known(x, 64, m).tolist(), K.histogram(strided, 64).tolist(),
                [K.moments(x, 0, K.saturation_bounds(*b))[7] for b in bounds],
            )
    finally:
        K.set_reads_in_parts(True)
        torch.set_num_threads(saved)
    (known, of_strided, saturated), one = got[True], got[False]
    assert known[:65] == one[0][:65] and of_strided[:65] == one[1][:65] and saturated == one[2]
    assert sum(known[:64]) == n and known[63] == 1 and sum(of_strided[:64]) == n
    K.set_enabled(False)
    try:
        assert saturated == [float(S.saturated(x, *b)) for b in bounds]
        assert known[:64] == S.histogram(x, 64, max_values=n)[:64].tolist()
    finally:
        K.set_enabled(True)


def _every_16_bit_pattern(dtype) -> torch.Tensor:
    """The 65,536 values of a 16-bit float type (NaNs, infs, subnormals)."""
    bits = np.arange(1 << 16, dtype=np.uint32)
    if dtype is torch.bfloat16:
        return torch.from_numpy((bits << 16).view(np.float32).copy()).bfloat16()
    return torch.from_numpy(bits.astype(np.uint16).view(np.float16).copy())


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_moments_are_the_floats_they_hold_and_saturation_is_torchs(dtype):
    # Every bit pattern: the saturated values counted as torch's ops count
    # them on a tensor of that type (the distance rounded to it), for
    # two-sided and top-only bounds; the moments those of the values read
    # as float32.
    x = _every_16_bit_pattern(dtype)
    assert x.dtype is dtype and x.numel() == 1 << 16
    tiny = 335.3 * 2.0**-24  # (between two float16 subnormals: the bound's rounding decides one value)
    for lo, hi in [(-0.99, 0.99), (0.01, 0.99), (0.0, 1.0), (None, 6.0), (None, 0.99), (0.3, 0.7), (-3.0, 3.0),
                   (-1e-5, 3e-5), (None, 6e4), (None, tiny), (-tiny, tiny), (None, 65519.0), (None, 65520.0),
                   (None, 3.4e38), (-3.4e38, 3.4e38)]:
        assert K.moments(x, 0, K.saturation_bounds(lo, hi))[7] == float(S.saturated(x, lo, hi)), (lo, hi)
    as_float = K.moments(x.float())
    got = K.moments(x)
    assert math.isnan(got[0]) and math.isnan(got[1]) and got[4:6] == as_float[4:6]
    finite = x[torch.isfinite(x)][: 1000 * 60].reshape(1000, 60).clone()  # (rows of 60 values)
    finite[:, 3] = 0.0  # a dead unit
    got, want = K.moments(finite, 60), torch_moments(finite.float(), 60)
    # (sums to float32's rounding: float16's values span 2^-24 to 65504, both sums round)
    assert got[4:7] == want[4:] and got[0:2] == want[0:2] and got[2:4] == pytest.approx(want[2:4], rel=1e-5)
    y = torch.tensor([1.0, math.inf, -math.inf, 0.0, math.nan]).to(dtype)
    m = K.moments(y)
    assert math.isnan(m[0]) and math.isnan(m[2]) and m[4:6] == [4.0, 3.0]
    # A histogram: the float32 copy's counts. (The float32-only reads refuse it.)
    hist = K.histogram_known(finite, 8, got)
    assert hist[:9].tolist() == K.histogram_known(finite.float(), 8, K.moments(finite.float()))[:9].tolist()
    assert hist[:8].tolist() == S.histogram(finite, 8)[:8].tolist() and hist[:8].sum() == finite.numel()
    assert K.total(y) is None and K.finite(y) is None


@needs_kernel
def test_reads_stay_on_one_core_where_the_kernels_openmp_is_not_torchs():
    class Entry:  # a library bound to another runtime's omp_get_max_threads, or to none
        argtypes = restype = None

        def __init__(self, address):
            self.address = address

        def __call__(self):
            return self.address

    class Library:
        def __init__(self, address):
            self.nd_openmp_entry = Entry(address)

    assert not kernel_build._shares_torchs_openmp(Library(None))  # built without OpenMP
    assert not kernel_build._shares_torchs_openmp(Library(12345))
    if "OpenMP" in torch.__config__.parallel_info():
        assert K.reads_in_parts()  # the real library: torch's runtime (its soname's loaded copy)


@needs_kernel
def test_a_gradient_too_small_to_square_in_float_has_its_norm_not_zero():
    # Vanishing, not absent: squares below float32's range add up in double.
    tiny = torch.full((5000,), 1e-25)
    mixed = torch.cat([torch.full((4096,), 1e-30), torch.full((10,), 3.0)])
    got = K.norms([tiny, mixed, torch.zeros(4097), torch.tensor([1e-20, 0.0])]).double()
    assert got[0].item() == pytest.approx(1e-25 * math.sqrt(5000), rel=1e-6)
    assert got[1].item() == pytest.approx(3.0 * math.sqrt(10), rel=1e-6)
    assert got[2].item() == 0.0
    assert got[3].item() == pytest.approx(1e-20, rel=1e-6)


@needs_kernel
def test_the_kernels_sum_is_torchs_and_keeps_nan_and_inf():
    g = torch.Generator().manual_seed(3)
    for n in (1, 4095, 4096, 4097, 70_000):
        x = torch.randn(n, generator=g)
        assert K.total(x) == pytest.approx(float(x.double().sum()), rel=1e-5, abs=1e-4)
    for bad, want in ((math.nan, math.isnan), (math.inf, lambda v: v == math.inf)):
        x = torch.randn(10_000, generator=g)
        x[7_777] = bad
        assert want(K.total(x))
    x = torch.zeros(10)
    x[2], x[3] = math.inf, -math.inf
    assert math.isnan(K.total(x))
    for odd in (torch.randn(4, 6).t(), torch.randn(5).double(), torch.zeros(0), torch.randn(5).as_subclass(_Wrapped)):
        assert K.total(odd) is None


@needs_kernel
@pytest.mark.parametrize("mode", ["replay", "every_step"])
def test_output_gradient_flags_come_from_the_kernel_and_match_torchs_sums(mode, monkeypatch):
    """The output gradients' non-finite flags (every step with "every_step")
    are the kernel's sums where it takes the gradient, with the same rows as
    torch's float64 sums; an inf born in backward shows. With "replay" no
    step reads them outside a replay (which counts exactly, in torch): the
    same rows all the same."""
    from tests.faults import InfBackward

    def model_fn():
        return nn.Sequential(nn.Linear(12, 16), nn.Tanh(), InfBackward(), nn.Linear(16, 4))

    summed = []
    real = K.total
    monkeypatch.setattr(K, "total", lambda x: summed.append(x.numel()) or real(x))

    def run():
        torch.manual_seed(0)
        model = model_fn()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        crit = nn.CrossEntropyLoss()
        rec = Recorder(model, opt, crit, stats_every=2, nonfinite=mode)
        make = batches((16, 12), 4)
        for _ in range(4):
            opt.zero_grad()
            x, y = make()
            crit(model(x), y).backward()
            opt.step()
        rows = np.stack([rec.row(i) for i in range(4)])
        rec.inst.remove()
        return rec.names, rows

    names, fused = run()
    if mode == "every_step":
        assert summed  # the kernel took the output gradients
    else:
        assert not summed  # read at the replays only (exact counts)
    K.set_enabled(False)
    try:
        names2, plain = run()
    finally:
        K.set_enabled(True)
    assert names == names2
    gout = metadata.METRIC_INDEX["gout_nonfinite"]
    np.testing.assert_array_equal(fused[:, :, gout], plain[:, :, gout])
    # The inf is born in backward at step 0, under a finite head (the
    # weights it reaches are NaN from the first update on).
    assert fused[0, names.index("3"), gout] == 0 and (fused[:, names.index("1"), gout] > 0).all()


class _Wrapped(torch.Tensor):
    """A tensor subclass (as a DTensor is one): its data_ptr need not be its values."""


@needs_kernel
@pytest.mark.parametrize(
    "odd",
    [lambda: torch.randn(4, 12)[:, ::2], lambda: torch.randn(5).double(), lambda: torch.randn(5).to(torch.complex64),
     lambda: torch.randn(3, 3).to_sparse(), lambda: torch.randn(5).as_subclass(_Wrapped)],
)
def test_a_list_the_kernel_does_not_take_whole_gets_torchs_norms(odd):
    ts = [torch.randn(7), odd(), torch.randn(9)]
    assert K.norms(ts) is None
    got = S.stacked_norms(ts)
    assert isinstance(got, list) and len(got) == 3
    # torch's own norm in each tensor's dtype (a bf16 norm is rounded in bf16), as the fallback takes it
    want = [float(torch.linalg.vector_norm(t.to_dense())) for t in ts]
    assert [float(n) for n in got] == pytest.approx(want, rel=1e-6)


def _16_bit_cases(g):
    """Lists of bfloat16 and float16 tensors (a model trained in them), some
    beside float32 ones (its float32 norm layers) or of both 16-bit types,
    with a NaN, an inf, squares beyond float32's range (bfloat16's) and
    below its smallest normal, subnormal float16 values."""
    def r(*shape):
        return torch.randn(*shape, generator=g)

    bf, h = torch.bfloat16, torch.float16
    return [
        [r(1501).to(bf)],
        [r(700).to(bf), r(300), r(1000).to(bf), r(4097).to(bf), r(5)],
        [r(3), torch.full((2000,), 1e20).to(bf), torch.tensor([math.nan, 1.0]).to(bf)],
        [r(999).to(bf), torch.tensor([math.inf]).to(bf), (r(2500) * 1e-22).to(bf),
         nn.Parameter(r(8, 3, 5, 5).to(bf).to(memory_format=torch.channels_last))],
        [r(1501).to(h)],
        [r(700).to(h), r(300), r(1000).to(h), r(4097).to(bf), r(5).to(h), r(33)],
        [r(3), torch.full((2000,), 6e4).to(h), torch.tensor([math.nan, 1.0]).to(h), (r(900) * 1e-6).to(h)],
    ]


@needs_kernel
@pytest.mark.parametrize("threads", [1, 2])
def test_16_bit_tensors_get_the_kernels_norms_of_the_values_they_hold(threads, monkeypatch):
    # Not rounded to their type as torch's norms are: the float64 norm of
    # the values to float32's rounding. Two cores cut the values in two
    # (inside a 16-bit tensor: its second half's address is 2 bytes a value
    # further).
    monkeypatch.setattr(K, "NORMS_SPLIT_ELEMENTS", 1000)
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        for ts in _16_bit_cases(torch.Generator().manual_seed(5)):
            want = torch.stack([torch.linalg.vector_norm(t.detach().double()) for t in ts])
            got = K.norms(ts)
            assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
            torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=0, equal_nan=True)
            if grad_reader.wait(600):  # (the C++ reader's addresses: float32 and 16-bit values told apart)
                torch.testing.assert_close(S.stacked_norms(ts).double(), want, rtol=1e-6, atol=0, equal_nan=True)
    finally:
        torch.set_num_threads(saved)
    exploding = K.norms([torch.full((2000,), 1e20).bfloat16(), (torch.ones(50) * 1e-25).bfloat16(),
                         torch.full((2000,), 6e4).half(), torch.full((50,), 6e-8).half()])
    assert math.isfinite(exploding[0]) and exploding[0] > 1e21 and exploding[1] > 0
    assert exploding[2] == pytest.approx(6e4 * math.sqrt(2000), rel=1e-3) and exploding[3] > 0


@needs_kernel
def test_random_tensors_of_every_kind_get_the_values_float64_and_torchs_ops_give():
    # 600 random batches of the three kinds, values from vanishing to
    # exploding, with dead units, zeros, a NaN or an inf: counts exact
    # (non-zeros, non-finite, dead units, saturated values as
    # stats.saturated), min and max exact, sums to float32's rounding; a
    # norm whose squares add up beyond float32's range is inf, as torch's
    # float32 dot, or the true one where no lane's partial sum overflowed.
    rng = np.random.default_rng(7)
    bounds = [(-0.99, 0.99), (0.01, 0.99), (None, 6.0), (-0.37, 0.81), (None, 0.5), (-1e-5, 3e-5)]
    for trial in range(600):
        dtype = (torch.float32, torch.bfloat16, torch.float16)[trial % 3]
        rows, units = int(rng.integers(1, 7)), int(rng.integers(1, 300))
        exp = rng.uniform(-6, 4) if dtype is torch.float16 else rng.uniform(-20, 20)
        x = torch.from_numpy(rng.standard_normal((rows, units)).astype(np.float32) * np.float32(10.0**exp))
        if trial % 4 == 0:
            x = x.relu()
        if trial % 5 == 0:
            x[:, int(rng.integers(units))] = 0.0
        if trial % 11 == 0:
            x.view(-1)[int(rng.integers(x.numel()))] = (math.nan, math.inf, -math.inf)[trial % 3]
        x = x.to(dtype)
        lo, hi = bounds[trial % len(bounds)]
        got = K.moments(x, units, K.saturation_bounds(lo, hi))
        f = x.double()
        nonfinite = int((~torch.isfinite(f)).sum())
        counts = [int((x != 0).sum()), nonfinite, int(((x != 0).sum(0) == 0).sum()), int(S.saturated(x, lo, hi))]
        assert got[4:] == counts, (trial, dtype, got, counts)
        if nonfinite:
            continue
        assert got[0:2] == [float(f.min()), float(f.max())], (trial, dtype)
        assert got[2] == pytest.approx(float(f.sum()), rel=1e-5, abs=1e-5 * float(f.abs().sum())), (trial, dtype)
        flat = x.float().reshape(-1)
        overflows = math.isinf(float(torch.dot(flat, flat)))
        assert got[3] == pytest.approx(float(f.norm()), rel=1e-5) or (overflows and got[3] == math.inf), (trial, dtype)


@needs_kernel
def test_dense_tensors_in_another_memory_order_get_the_kernels_norms():
    # channels_last (a CNN's weights and gradients in that memory format),
    # and a transposed matrix through the C++ reader: the same values, in
    # another order; the Python path takes channels_last.
    g = torch.Generator().manual_seed(8)
    last = torch.randn(8, 3, 5, 5, generator=g).to(memory_format=torch.channels_last)
    last3d = torch.randn(2, 3, 4, 4, 4, generator=g).to(memory_format=torch.channels_last_3d)
    ts = [torch.randn(7, generator=g), last, last3d]
    assert not last.is_contiguous() and not last3d.is_contiguous()
    want = [float(torch.linalg.vector_norm(t)) for t in ts]
    got = K.norms(ts)
    assert isinstance(got, torch.Tensor) and got.tolist() == pytest.approx(want, rel=1e-6)
    if not grad_reader.wait(600):  # (built on a thread at first use: a fresh clone's first tests run before it)
        pytest.skip("the C++ gradient reader cannot be built here")
    for got in (S.stacked_norms(ts), S.stacked_norms(ts + [torch.randn(6, 4, generator=g).t()])):
        assert isinstance(got, torch.Tensor) and got[:3].tolist() == pytest.approx(want, rel=1e-6)
    assert grad_reader.read_data(ts + [torch.randn(6, 4).t()]) is not None
    assert grad_reader.read_data(ts + [torch.randn(6, 8)[:, ::2]]) is None


@needs_kernel
@pytest.mark.parametrize(
    "make",
    [lambda: torch.randn(256, 1024), lambda: torch.randn(3), lambda: torch.randn(4, 6).t(),
     lambda: torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
     lambda: torch.randn(2, 3, 2, 4, 5).to(memory_format=torch.channels_last_3d),
     lambda: torch.randn(2, 3, 4, 5).permute(0, 2, 1, 3), lambda: torch.randn(6, 5).bfloat16(),
     lambda: torch.randn(6, 5).half(),
     lambda: torch.randn(5).double(), lambda: torch.zeros(0), lambda: torch.randn(5).as_subclass(_Wrapped),
     lambda: torch.randn(3, 3).to_sparse(), lambda: torch.randint(0, 5, (8,))],
)
def test_takes_says_what_moments_takes(make):
    x = make()
    assert K.takes(x) == (K.moments(x) is not None)
    K.set_enabled(False)
    try:
        assert not K.takes(x)
    finally:
        K.set_enabled(True)


@needs_kernel
def test_a_negative_view_is_left_to_torch():
    """``torch._neg_view`` keeps the opposites of its values in memory: the
    kernel, which reads the memory, must not read it."""
    x = torch.arange(1.0, 7.0).reshape(2, 3)
    neg = torch._neg_view(x)
    assert neg.is_neg() and neg.is_contiguous()
    assert not K.takes(neg) and K.moments(neg) is None and K.histogram(neg.reshape(-1), 4) is None
    got = S.moments(neg)  # (torch's ops: the values as torch gives them)
    assert float(got[2]) == -21.0


@needs_kernel
@pytest.mark.parametrize("kernel", [True, False])
def test_the_batch_the_kernel_measures_is_measured_without_switching_torchs_threads(kernel, monkeypatch):
    """torch's threads are switched to one only for torch's own small
    reductions: around the kernel's pass the switch made it twice as slow."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        model = mlp()
        rec = Recorder(model, stats_every=1)
        calls = []
        real = torch.set_num_threads
        monkeypatch.setattr(torch, "set_num_threads", lambda n: (calls.append(n), real(n))[1])
        K.set_enabled(kernel)
        x = torch.randn(256, 1024)  # large enough that one thread pays for torch's ops (stats.GRAIN)
        rec.inst._threads = 2
        rec.inst._measure_input((x,), {})
        assert (1 in calls) is (not kernel)
        host, rows, keys = rec.inst._col.finish()
        vals = np.concatenate(host) if host else np.zeros(0)
        got = dict(zip(keys.tolist(), vals.tolist()))
        assert got[S.Key.OUT_MIN] == float(x.min()) and got[S.Key.OUT_MAX] == float(x.max())
        assert got[S.Key.OUT_SUM] == pytest.approx(float(x.double().sum()), rel=1e-5)
    finally:
        K.set_enabled(True)
        monkeypatch.undo()
        torch.set_num_threads(threads)
        rec.inst.remove()


def test_a_host_statistic_that_is_not_finite_fails_the_steps_check():
    col = Collector()
    col.measured(3, [S.Key.OUT_MIN, S.Key.OUT_SUM], [0.0, 1.5])
    assert all_finite([col])
    other = Collector()
    other.measured(4, [S.Key.OUT_SUM], [math.nan])
    assert not all_finite([other])
    col.extend(other)  # (the step's parts are joined at the commit)
    assert not all_finite([col])
    host, rows, keys = col.finish()
    assert rows.tolist() == [3, 3, 4] and math.isnan(np.concatenate(host)[-1])


@needs_kernel
@pytest.mark.parametrize("shape", [(1,), (7,), (256, 33), (64, 1024), (3, 5000)])
def test_a_histogram_bounded_by_the_moments_just_read_is_the_two_pass_one(shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1)) * 3
    two_pass = K.histogram(x.reshape(-1), S.HIST_BINS)
    one_pass = K.histogram_known(x, S.HIST_BINS, K.moments(x))
    assert torch.equal(one_pass[: S.HIST_BINS + 3], two_pass[: S.HIST_BINS + 3])  # counts, 0, min, max
    assert one_pass[S.HIST_BINS + 3 :].tolist() == pytest.approx(two_pass[S.HIST_BINS + 3 :].tolist(), rel=1e-5)
    x.view(-1)[-1] = math.nan  # the moments count it: torch's general path takes such a tensor
    assert K.histogram_known(x, S.HIST_BINS, K.moments(x)) is None


@needs_kernel
def test_the_steps_check_reads_float32_cpu_values_in_the_kernel(monkeypatch):
    """Gradient norms and a loss, as a cheap step checks them: in the
    kernel's read, no torch op (whose code has gone cold since the last
    step); a float32 value near its maximum is finite (though a float sum
    of two is not); other dtypes take torch's ops."""
    norms = torch.full((5000,), 3e38)
    col = Collector()
    col.add_stacked(norms, np.arange(5000), S.Key.GRAD_NORM)
    monkeypatch.setattr(torch, "cat", None)  # (fails if called)
    monkeypatch.setattr(torch, "isfinite", None)
    assert K.finite(norms) is True and all_finite([col], [torch.tensor(2.5)])
    for bad in (math.nan, math.inf, -math.inf):
        for at in (0, 4097, 4999):
            poisoned = norms.clone()
            poisoned[at] = bad
            assert K.finite(poisoned) is False
            other = Collector()
            other.add_stacked(poisoned, np.arange(5000), S.Key.GRAD_NORM)
            assert not all_finite([other])
        assert not all_finite([col], [torch.tensor(bad)])
    monkeypatch.undo()
    wide = torch.tensor([1.0, math.nan], dtype=torch.float64)
    assert K.finite(wide) is None and not all_finite([col], [wide])
    assert all_finite([col], [wide[:1]])


def run_python(code: str, env: dict, timeout: float = 120) -> str:
    """What ``code`` prints, run by a fresh Python with ``env`` added."""
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def failing_compiler(tmp_path, name: str) -> str:
    """The path of a compiler named ``name`` that fails every build."""
    fake = tmp_path / name
    fake.write_text(f"#!/bin/sh\necho '{name}: error: no such compiler' >&2\nexit 1\n")
    fake.chmod(0o755)
    return str(fake)


def _run_env(env: dict) -> str:
    code = (
        "import torch\n"
        "from tb_neuraldbg.training import cpu_kernel as K\n"
        "print(K.available(), K.moments(torch.ones(4)) is None)\n"
    )
    return run_python(code, env)


def test_without_a_working_compiler_or_when_turned_off_torchs_ops_are_used(tmp_path):
    fake = failing_compiler(tmp_path, "cc")
    assert _run_env({"CC": fake, "XDG_CACHE_HOME": str(tmp_path / "cache")}) == "False True"
    assert not list((tmp_path / "cache").rglob("*.so"))  # nothing half-built left behind
    assert _run_env({K.ENV: "0", "XDG_CACHE_HOME": str(tmp_path / "cache2")}) == "False True"


@needs_kernel
def test_a_compiler_without_openmp_builds_a_kernel_that_reads_on_one_core(tmp_path):
    # A compiler that refuses -fopenmp (clang without its runtime): the next
    # flags build the kernel, whose large reads then stay on one core.
    real = os.environ.get("CC") or shutil.which("cc")
    wrapper = tmp_path / "cc"
    wrapper.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ "$a" = -fopenmp ] && { echo "cc: unsupported option -fopenmp" >&2; exit 1; }; done\n'
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    code = (
        "import torch\n"
        "from tb_neuraldbg.training import cpu_kernel as K\n"
        "torch.set_num_threads(2)\n"
        "x = torch.randn(8, K.PART_ELEMENTS // 2, generator=torch.Generator().manual_seed(0))\n"
        "got = K.moments(x, x.shape[1])\n"
        "want = x.double().sum().item()\n"
        "print(K.available(), K.reads_in_parts(), abs(got[2] - want) < 1e-3 * x.numel() ** 0.5, got[6])\n"
    )
    assert run_python(code, {"CC": str(wrapper), "XDG_CACHE_HOME": str(tmp_path / "cache")}) == "True False True 0.0"


def assert_built_once(load, cache, pattern: str, loaded: str) -> None:
    """``load(env)`` (a fresh process's answer, ``loaded`` once built)
    builds one library matching ``pattern`` into a private directory of
    ``cache``, and a second process loads it without building it again."""
    assert load({"XDG_CACHE_HOME": str(cache)}) == loaded
    built = list(cache.rglob(pattern))
    assert len(built) == 1 and (built[0].parent.stat().st_mode & 0o077) == 0
    mtime = built[0].stat().st_mtime_ns
    assert load({"XDG_CACHE_HOME": str(cache)}) == loaded  # loaded, not rebuilt
    assert built[0].stat().st_mtime_ns == mtime


@needs_kernel
def test_the_library_is_built_once_into_a_private_directory(tmp_path):
    assert_built_once(_run_env, tmp_path / "cache", "moments-*.so", "True False")


def _rows(model_fn, shape, classes, integer=None, steps=6, poison_at=None, **cfg):
    torch.manual_seed(0)
    model = model_fn()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    crit = nn.CrossEntropyLoss()
    rec = Recorder(model, opt, crit, stats_every=2, hist_every=4, **cfg)
    make = batches(shape, classes, integer=integer)
    for step in range(steps):
        opt.zero_grad()
        x, y = make()
        if step == poison_at:
            x = x.clone()
            x[0].fill_(float("nan"))
        crit(model(x), y).backward()
        opt.step()
    rows = np.stack([rec.row(i) for i in range(steps)])
    hists = np.concatenate([p.host_values()[p.keys == S.Key.HIST] for p in rec.packets])  # steps 0-1 and 4
    return rec.names, rows, hists


def bounded_mlp():
    """Every kind of bounded activation, with weights large enough that
    some of each one's outputs are in its flat ends."""
    model = nn.Sequential(
        nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, 32), nn.Sigmoid(), nn.Linear(32, 32), nn.ReLU6(),
        nn.Linear(32, 32), nn.Hardtanh(-0.5, 0.5), nn.Linear(32, 32), nn.Hardsigmoid(), nn.Linear(32, 4),
    )
    with torch.no_grad():
        for m in model[:-1:2]:
            m.weight.mul_(8.0)
        model[4].bias.fill_(4.0)  # (the ReLU6's input: some of it over 6)
    return model


class AutocastMLP(nn.Module):
    """An MLP trained under CPU autocast (bfloat16): its layers' outputs,
    bounded ones included, are bfloat16."""

    def __init__(self):
        super().__init__()
        self.net = bounded_mlp()

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.net(x).float()


class BFloat16MLP(nn.Module):
    """:func:`bounded_mlp` cast to bfloat16 (``model.to(torch.bfloat16)``),
    as models trained in bfloat16 are: its weights, activations and
    gradients are bfloat16."""

    def __init__(self):
        super().__init__()
        self.net = bounded_mlp().to(torch.bfloat16)

    def forward(self, x):
        return self.net(x.to(torch.bfloat16)).float()


class Float16MLP(BFloat16MLP):
    """:class:`BFloat16MLP` in float16 (``model.to(torch.float16)``)."""

    def __init__(self):
        nn.Module.__init__(self)
        self.net = bounded_mlp().to(torch.float16)

    def forward(self, x):
        return self.net(x.to(torch.float16)).float()


class AutocastF16MLP(AutocastMLP):
    """:class:`AutocastMLP` under a float16 CPU autocast."""

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.float16):
            return self.net(x).float()


def channels_last_cnn():
    """The CNN in channels_last, PyTorch's advice for CNNs on CPUs: its
    convolutions' outputs, weights and gradients lie channel-innermost."""
    return CNN().to(memory_format=torch.channels_last)


@needs_kernel
@pytest.mark.parametrize(
    "model_fn, shape, classes, integer, cfg",
    [(mlp, (16, 12), 4, None, {}), (CNN, (4, 3, 8, 8), 5, None, {}), (FunctionalMLP, (8, 10), 3, None, {}),
     (LSTMNet, (4, 6), 3, 20, {}), (mlp, (16, 12), 4, None, {"nonfinite": "every_step"}),
     (bounded_mlp, (16, 12), 4, None, {}), (channels_last_cnn, (4, 3, 8, 8), 5, None, {}),
     (AutocastMLP, (16, 12), 4, None, {}), (AutocastMLP, (16, 12), 4, None, {"nonfinite": "every_step"}),
     (BFloat16MLP, (16, 12), 4, None, {}), (BFloat16MLP, (16, 12), 4, None, {"nonfinite": "every_step"}),
     (Float16MLP, (16, 12), 4, None, {}), (AutocastF16MLP, (16, 12), 4, None, {})],
)
def test_a_watched_run_has_the_same_rows_with_the_kernel_and_with_torchs_ops(
    model_fn, shape, classes, integer, cfg, monkeypatch
):
    taken, bounded, saturation, in_order, dtypes = [], [], [], [], set()
    real, real_hist = K.moments, K.histogram_known

    def moments(x, units=0, bounds=None):
        taken.append(units)
        saturation.append(bounds)
        in_order.append(x.is_contiguous())
        dtypes.add(x.dtype)
        return real(x, units, bounds)

    def measure_and_note(*a):
        taken.append(int(a[1] or a[3]))
        saturation.append(a[5])
        in_order.append(a[2].is_contiguous())
        dtypes.add(a[2].dtype)
        return measure(*a)

    monkeypatch.setattr(K, "moments", moments)
    monkeypatch.setattr(K, "histogram_known", lambda *a: bounded.append(1) or real_hist(*a))
    norms_16, real_norms = [], K._norms_of
    monkeypatch.setattr(K, "_norms_of", lambda p, n, kinds, scale=None: (
        norms_16.append(kinds is not None) or real_norms(p, n, kinds, scale)))
    measure = grad_reader._measure
    if measure is not None:  # (the one-call reads hand the kernel the same tensors; units: x_batched, y_dead)
        monkeypatch.setattr(grad_reader, "_measure", measure_and_note)
    poison = 3 if integer is None else None  # a NaN batch: the replay (or every-step counts) must see it the same
    names, fused, fused_hists = _rows(model_fn, shape, classes, integer, poison_at=poison, **cfg)
    assert taken and any(taken)  # the kernel measured, dead units included
    assert bounded  # histograms binned within the moments' bounds
    if model_fn is channels_last_cnn:  # channels_last activations read by the kernel as they lie
        assert False in in_order
    if model_fn in (AutocastMLP, AutocastF16MLP):  # 16-bit outputs read by the kernel, their saturated values too
        want = torch.bfloat16 if model_fn is AutocastMLP else torch.float16
        assert want in dtypes and K.saturation_bounds(-0.99, 0.99) in saturation
    if model_fn is bounded_mlp:  # the kernel counted the saturated values (the Tanh's, among them)
        assert K.saturation_bounds(-0.99, 0.99) in saturation
        sat_frac = fused[:, :, metadata.METRIC_INDEX["act_sat_frac"]]
        assert (sat_frac[[0, 2]][:, np.isfinite(sat_frac[0])] > 0).all() and np.isfinite(sat_frac[0]).sum() == 5
    K.set_enabled(False)
    try:
        names2, plain, plain_hists = _rows(model_fn, shape, classes, integer, poison_at=poison, **cfg)
    finally:
        K.set_enabled(True)
    assert names == names2
    assert np.array_equal(np.isnan(fused), np.isnan(plain))
    if model_fn in (BFloat16MLP, Float16MLP):  # the kernel's norms of 16-bit gradients and weights; torch's rounded
        assert any(norms_16)
        norm_cols = [metadata.METRIC_INDEX[m] for m in ("grad_norm", "weight_norm", "update_ratio")]
        np.testing.assert_allclose(fused[:, :, norm_cols], plain[:, :, norm_cols], rtol=2**-7, atol=0, equal_nan=True)
        fused[:, :, norm_cols] = plain[:, :, norm_cols]
    else:
        assert not any(norms_16)
    np.testing.assert_allclose(fused, plain, rtol=1e-5, atol=1e-6, equal_nan=True)
    np.testing.assert_allclose(fused_hists, plain_hists, rtol=1e-5, atol=1e-5, equal_nan=True)


def wide_cnn():
    """A CNN whose first activation is two parts' worth (16 x 32 x 32 x 32
    values) and whose parameters are few (their norms on one core)."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 8, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(8, 5),
    )


@needs_kernel
@needs_torchs_openmp
def test_a_watched_run_reads_its_large_activations_in_parts_with_the_same_rows(gradients_read_in):
    # Both ways to the kernel: the one C++ call of a full step's hook, and
    # its Python calls (before grads.cpp is built, or where it cannot be),
    # which must not switch torch to one thread around the kernel's reads.
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert K.reads_in_parts()  # (loaded first: its check at load reads in parts too)
        before = K.helper_seconds()
        names, parts, parts_hists = _rows(wide_cnn, (16, 3, 32, 32), 5, poison_at=3)
        assert K.helper_seconds() > before  # torch's second thread read parts of the activations
        K.set_reads_in_parts(False)
        try:
            names2, one, one_hists = _rows(wide_cnn, (16, 3, 32, 32), 5, poison_at=3)
        finally:
            K.set_reads_in_parts(True)
    finally:
        torch.set_num_threads(saved)
    assert names == names2
    assert np.array_equal(np.isnan(parts), np.isnan(one))
    np.testing.assert_allclose(parts, one, rtol=1e-6, atol=1e-9, equal_nan=True)
    np.testing.assert_array_equal(parts_hists, one_hists)


def test_a_build_removes_what_unfinished_builds_left_and_nothing_else(tmp_path):
    # A process that ends during a build (a daemon thread's) leaves its
    # temporary file: the next build removes those over an hour old.
    old = time.time() - 2 * 3600
    left = [tmp_path / ".building-abc.so", tmp_path / "tmpq1w2e3.so"]  # (the second: the older builds' names)
    fresh = tmp_path / ".building-now.so"  # another process's build, under way
    kept = [tmp_path / "moments-0123456789abcdef.so", tmp_path / "tmp-notes.txt", fresh]
    for f in left + kept:
        f.write_bytes(b"x")
    for f in left + kept[:2]:
        os.utime(f, (old, old))
    tmp = kernel_build.temporary_file(str(tmp_path / "grads-0123.so"))
    assert os.path.basename(tmp).startswith(".building-") and tmp.endswith(".so") and os.path.getsize(tmp) == 0
    assert not any(f.exists() for f in left)
    assert all(f.exists() for f in kept)


def _builds(tmp_path, name="lib-0123.so", seconds=1.0, log="runs.txt"):
    """compile_once's arguments for a fake build: each run appends a line
    to ``log``, takes ``seconds``, then writes its output."""
    path, runs = tmp_path / name, tmp_path / log
    script = f'echo run >> "{runs}"; sleep {seconds}; echo built > "$0"'
    return str(path), runs, (lambda tmp: [["sh", "-c", script, tmp]])


def test_processes_that_start_together_build_once(tmp_path):
    # The ranks of a node, a test suite's subprocesses: one build, the others
    # wait for it and find it done (not forty compilers of 1 GB at once).
    path, runs, _ = _builds(tmp_path)
    code = (
        "import sys\n"
        "from tb_neuraldbg.training import kernel_build\n"
        f"script = 'echo run >> \"{runs}\"; sleep 1; echo built > \"$0\"'\n"
        f"kernel_build.compile_once({path!r}, lambda tmp: [['sh', '-c', script, tmp]], 30)\n"
        "print(open(sys.argv[1]).read().strip())\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0] and outs == ["built"] * 3
    assert runs.read_text().splitlines() == ["run"]


def test_a_build_lands_when_the_process_that_started_it_ends(tmp_path):
    # A short script that ends during the build: the build goes on, renames
    # its output into place, and the next process loads it without building.
    path, runs, commands = _builds(tmp_path, seconds=2.0)
    code = (
        "from tb_neuraldbg.training import kernel_build\n"
        f"script = 'echo run >> \"{runs}\"; sleep 2; echo built > \"$0\"'\n"
        f"kernel_build.compile_once({path!r}, lambda tmp: [['sh', '-c', script, tmp]], 30)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 60
    while not runs.exists() and time.monotonic() < deadline:  # the build has started
        time.sleep(0.05)
    p.kill()
    p.wait()
    assert not os.path.exists(path)
    kernel_build.compile_once(path, commands, 30)  # waits for that build, then finds it
    assert open(path).read().strip() == "built"
    assert runs.read_text().splitlines() == ["run"]
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".building-")]


def test_a_failed_build_says_why_and_leaves_nothing(tmp_path):
    path = str(tmp_path / "lib-0123.so")
    fail = [["sh", "-c", "echo 'cc: error: first' >&2; exit 1"], ["sh", "-c", "echo 'cc: error: last' >&2; exit 2"]]
    with pytest.raises(RuntimeError, match="cc: error: last"):
        kernel_build.compile_once(path, lambda tmp: fail, 30)
    assert sorted(os.listdir(tmp_path)) == ["lib-0123.so.lock"]
