"""The on-device reductions and their host-side completion, against plain
torch/numpy reference computations."""

import math
import warnings

import numpy as np
import pytest
import torch

from tb_neuraldbg import DebugWriter, metadata
from tb_neuraldbg.offline.reader import read_run
from tb_neuraldbg.offline.rediagnose import diagnose_run
from tb_neuraldbg.training.step import stats as S
from tb_neuraldbg.training.step.stats import Key

M = metadata.METRIC_INDEX


def _host(ts):
    return [float(t) for t in ts]


def _assemble(slots, num_rows):
    """slots: [(row, key, value)] -> the assembled [L, M] row."""
    rows = np.array([r for r, _, _ in slots])
    keys = np.array([k for _, k, _ in slots])
    vals = np.array([v for _, _, v in slots], dtype=np.float64)
    return S.assemble(vals, rows, keys, num_rows)


def _out_slots(row, x, dead=False):
    mn, mx, s, q, nz, *rest = _host(S.moments(x, dead=dead))
    slots = [
        (row, Key.OUT_MIN, mn),
        (row, Key.OUT_MAX, mx),
        (row, Key.OUT_SUM, s),
        (row, Key.OUT_NORM, q),
        (row, Key.OUT_NZ, nz),
        (row, Key.OUT_N, x.numel()),
    ]
    if dead:
        slots += [(row, Key.OUT_DEAD, rest[0]), (row, Key.OUT_UNITS, x[0].numel())]
    return slots


@pytest.mark.parametrize("shape", [(64, 33), (8, 4, 5, 5), (3,)], ids=["2d", "4d", "1d"])
def test_moments_give_mean_std_absmax_zero_frac(shape):
    torch.manual_seed(0)
    x = torch.relu(torch.randn(shape) * 3 + 0.5)
    x[..., 0] = -7.0  # a negative extreme so max|x| comes from the minimum
    row = _assemble(_out_slots(0, x), 1)[0]
    assert row[M["act_mean"]] == pytest.approx(x.mean().item(), rel=1e-5, abs=1e-6)
    assert row[M["act_std"]] == pytest.approx(x.std().item(), rel=1e-4)
    assert row[M["act_absmax"]] == pytest.approx(x.abs().max().item())
    assert row[M["act_zero_frac"]] == pytest.approx((x == 0).float().mean().item())
    assert row[M["act_nonfinite"]] == 0


@pytest.mark.parametrize("value", [1.0, 0.01645, 3.7e4], ids=["ids", "small", "large"])
def test_a_constant_output_has_std_exactly_zero(value):
    """The sum of squares less the squared sum loses float32's digits (a
    constant batch of 32 x 12 ids read std 2.7e-4): the range bounds it."""
    x = torch.full((32, 12), value)
    mn, mx, s, q, nz = _host(S.moments(x))
    assert (q * q - s * s / x.numel()) != 0.0  # the rounding this guards against is there
    row = _assemble(_out_slots(0, x), 1)[0]
    assert row[M["act_std"]] == 0.0
    assert row[M["act_absmax"]] == pytest.approx(value)


def test_the_range_bound_leaves_a_spread_output_alone():
    x = torch.tensor([0.0, 1.0] * 50)  # std at Popoviciu's bound exactly
    row = _assemble(_out_slots(0, x), 1)[0]
    assert row[M["act_std"]] == pytest.approx(x.std().item(), rel=1e-6)


def test_zero_and_dead_counts_units_dead_for_the_whole_batch():
    x = torch.randn(16, 10).relu()
    x[:, 3] = 0
    x[:, 7] = 0
    x[5, 7] = 1.0  # alive for one sample: not dead
    nz, dead = S.zero_and_dead(x)
    assert int(nz) == int((x != 0).sum())
    assert int(dead) == 1
    row = _assemble(_out_slots(0, x, dead=True), 1)[0]
    assert row[M["act_dead_frac"]] == pytest.approx(1 / 10)


def test_dead_units_of_a_conv_output_are_positions_of_a_sample():
    x = torch.rand(4, 3, 2, 2) + 0.1
    x[:, 1] = 0  # a dead channel: 4 of the 12 units of a sample
    _, dead = S.zero_and_dead(x)
    assert int(dead) == 4


def test_saturated_counts_both_flat_ends():
    y = torch.tensor([-1.0, -0.995, -0.5, 0.0, 0.98, 0.99, 1.0])
    assert int(S.saturated(y, -0.99, 0.99)) == 4


def test_nonfinite_count_is_exact():
    x = torch.randn(100)
    x[3], x[10], x[11] = math.nan, math.inf, -math.inf
    assert int(S.nonfinite_count(x)) == 3
    assert int(S.nonfinite_count(torch.arange(5))) == 0  # integers are finite


def test_flag_moment_sees_nan_and_inf():
    x = torch.ones(10)
    assert math.isfinite(float(S.flag_moment(x)))
    x[2] = math.inf
    assert not math.isfinite(float(S.flag_moment(x)))
    x[3] = -math.inf  # inf + -inf = NaN: still flagged
    assert not math.isfinite(float(S.flag_moment(x)))


def test_half_precision_sums_do_not_overflow_into_a_false_flag():
    x = torch.full((100_000,), 60.0, dtype=torch.float16)  # sum 6e6 > fp16 max
    assert math.isfinite(float(S.flag_moment(x)))
    mn, mx, s, q, nz = S.moments(x)
    assert float(s) == pytest.approx(6e6, rel=1e-3)


def test_nonfinite_flag_and_exact_count_in_assemble():
    x = torch.randn(8, 4)
    x[0, 0] = math.nan
    slots = _out_slots(0, x)
    flagged = _assemble(slots, 1)[0]
    assert flagged[M["act_nonfinite"]] == 1  # "at least one" without an exact count
    exact = _assemble(slots + [(0, Key.OUT_NF, 1.0)], 1)[0]
    assert exact[M["act_nonfinite"]] == 1
    # only the sum (a cheap step) and no exact count: flag from the sum
    y = torch.ones(5)
    y[1] = math.inf
    cheap = _assemble([(0, Key.OUT_SUM, float(y.sum())), (0, Key.OUT_N, 5)], 1)[0]
    assert cheap[M["act_nonfinite"]] == 1
    assert np.isnan(cheap[M["act_std"]])  # not measured at a cheap step


def test_histogram_matches_numpy_and_drops_nonfinite():
    torch.manual_seed(1)
    x = torch.randn(1000)
    x[:5] = math.nan
    x[5] = math.inf
    run = S.histogram(x).numpy()
    parts = S.histogram_parts(run)
    finite = x[torch.isfinite(x)].numpy().astype(np.float64)
    ref, edges = np.histogram(finite, bins=S.HIST_BINS, range=(finite.min(), finite.max()))
    assert parts["nonfinite"] == 6
    assert parts["num"] == finite.size
    # Values on an inner edge may fall on either side in float32: allow 1.
    assert np.abs(np.array(parts["bucket_counts"]) - ref).max() <= 1
    assert parts["bucket_limits"] == pytest.approx(edges[1:].tolist(), rel=1e-5)
    assert parts["sum"] == pytest.approx(finite.sum(), rel=1e-4)
    assert parts["sum_squares"] == pytest.approx((finite**2).sum(), rel=1e-4)


def test_histogram_of_finite_values_on_the_cpu_matches_numpy():
    # The CPU's finite-values path (bincount over quantised values) against
    # numpy, on ReLU outputs (a spike of zeros in the first bin) and on values
    # whose float32 sum overflows (there the general path's masks answer).
    torch.manual_seed(2)
    relu = torch.randn(256, 64).relu()
    huge = torch.full((8,), 3e38)
    huge[0] = -1.0
    for x in (relu, huge):
        parts = S.histogram_parts(S.histogram(x).numpy())
        ref_x = x.reshape(-1).numpy().astype(np.float64)
        ref, edges = np.histogram(ref_x, bins=S.HIST_BINS, range=(ref_x.min(), ref_x.max()))
        assert parts["nonfinite"] == 0 and parts["num"] == ref_x.size
        assert np.abs(np.array(parts["bucket_counts"]) - ref).max() <= 1
        assert parts["min"] == pytest.approx(ref_x.min()) and parts["max"] == pytest.approx(ref_x.max(), rel=1e-6)
    relu_parts = S.histogram_parts(S.histogram(relu).numpy())
    ref_x = relu.reshape(-1).double()
    assert relu_parts["sum"] == pytest.approx(float(ref_x.sum()), rel=1e-5)
    assert relu_parts["sum_squares"] == pytest.approx(float((ref_x * ref_x).sum()), rel=1e-5)


def test_histogram_of_a_constant_and_of_nothing_finite():
    parts = S.histogram_parts(S.histogram(torch.full((10,), 2.0)).numpy())
    assert parts["num"] == 10 and parts["min"] == parts["max"] == 2.0
    none = S.histogram_parts(S.histogram(torch.full((4,), math.nan)).numpy())
    assert none["num"] == 0 and none["nonfinite"] == 4


def test_foreach_norm_matches_vector_norm_across_dtypes_and_sparse():
    ts = [torch.randn(3, 4), torch.randn(7, dtype=torch.float64), torch.randn(2, 2)]
    sparse = torch.sparse_coo_tensor([[0, 2]], [3.0, 4.0], (5,), check_invariants=True)
    out = S.foreach_norm(ts + [sparse])
    for t, n in zip(ts, out):
        assert float(n) == pytest.approx(float(torch.linalg.vector_norm(t)), rel=1e-6)
    assert float(out[-1]) == pytest.approx(5.0)


def test_foreach_norm_falls_back_per_call_when_the_private_op_fails(monkeypatch):
    working = torch._foreach_norm
    calls = []

    def broken(ts):
        calls.append(len(ts))
        raise RuntimeError("no foreach here")

    monkeypatch.setattr(torch, "_foreach_norm", broken)
    with pytest.warns(UserWarning, match="_foreach_norm"):
        out = S.foreach_norm([torch.ones(4)])
    assert float(out[0]) == 2.0
    # No flag left behind: once the op works again, it is used again.
    monkeypatch.setattr(torch, "_foreach_norm", lambda ts: calls.append(-len(ts)) or working(ts))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = S.foreach_norm([torch.ones(4), torch.ones(9)])
    assert [float(n) for n in out] == [2.0, 3.0] and calls == [1, -2]


def test_foreach_norm_without_the_private_op(monkeypatch):
    monkeypatch.delattr(torch, "_foreach_norm")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = S.foreach_norm([torch.ones(4), torch.ones(9, dtype=torch.float64)])
    assert [float(n) for n in out] == [2.0, 3.0]


def test_foreach_sub_groups_devices_and_dtypes_and_falls_back(monkeypatch):
    xs = [torch.full((3,), 5.0), torch.full((2,), 5.0, dtype=torch.float64), torch.full((4,), 5.0)]
    ys = [torch.ones(3), torch.full((2,), 2.0, dtype=torch.float64), torch.full((4,), 3.0)]
    S.foreach_sub_(xs, ys)
    assert [x.tolist() for x in xs] == [[4.0] * 3, [3.0] * 2, [2.0] * 4]

    def broken(a, b):
        raise RuntimeError("no foreach here")

    monkeypatch.setattr(torch, "_foreach_sub_", broken)
    with pytest.warns(UserWarning, match="_foreach_sub_"):
        S.foreach_sub_(xs, ys)
    assert [x.tolist() for x in xs] == [[3.0] * 3, [1.0] * 2, [-1.0] * 4]


def test_assemble_parameters_input_reference_and_pseudo_values():
    slots = [
        # row 1: two parameters with gradient norms 3 and 4 -> 5
        (1, Key.GRAD_NORM, 3.0),
        (1, Key.GRAD_NORM, 4.0),
        (1, Key.GRAD_MISSING, 0),
        (1, Key.WEIGHT_NORM, 6.0),
        (1, Key.WEIGHT_NORM, 8.0),
        (1, Key.UPD_NORM, 0.3),
        (1, Key.UPD_NORM, 0.4),
        (1, Key.UPD_BASE, 6.0),
        (1, Key.UPD_BASE, 8.0),
        # row 1's output, row 2's input is the same tensor
        (1, Key.OUT_SUM, 4.0),
        (1, Key.OUT_NZ, 2.0),
        (1, Key.OUT_N, 8.0),
        (1, Key.OUT_MIN, 0.0),
        (1, Key.OUT_MAX, 2.0),
        (2, Key.IN_REF, 1),
        (3, Key.VALUE, 0.25),
        (3, Key.SCALE, 1024.0),
    ]
    row = _assemble(slots, 4)
    assert row[1, M["grad_norm"]] == pytest.approx(5.0)
    assert row[1, M["grad_nonfinite"]] == 0
    assert row[1, M["weight_norm"]] == pytest.approx(10.0)
    assert row[1, M["update_ratio"]] == pytest.approx(0.05)
    assert row[2, M["in_zero_frac"]] == pytest.approx(0.75)
    assert row[2, M["in_nonfinite"]] == 0
    assert row[3, M["value"]] == pytest.approx(0.25) and row[3, M["scale"]] == 1024
    assert np.isnan(row[0]).all()  # nothing measured for row 0
    assert np.isnan(row[2, M["grad_norm"]]) and np.isnan(row[2, M["grad_nonfinite"]])


def test_assemble_flags_a_nonfinite_gradient_norm():
    row = _assemble([(0, Key.GRAD_NORM, 1.0), (0, Key.GRAD_NORM, math.inf)], 1)[0]
    assert row[M["grad_norm"]] == math.inf and row[M["grad_nonfinite"]] == 1
    exact = _assemble([(0, Key.GRAD_NORM, math.nan), (0, Key.GRAD_NF, 2), (0, Key.GRAD_NF, 3)], 1)[0]
    assert exact[M["grad_nonfinite"]] == 5


def test_histogram_of_a_large_tensor_is_a_strided_sample():
    x = torch.arange(100, dtype=torch.float32)
    parts = S.histogram_parts(S.histogram(x, max_values=10).numpy())
    assert parts["num"] == 10 and parts["min"] == 0 and parts["max"] == 90


def test_inherited_flags_follow_a_chain_of_pointwise_modules():
    # row 1 measured (non-finite), rows 2 and 3 pointwise: input = previous row
    slots = [
        (1, Key.OUT_SUM, math.nan),
        (1, Key.OUT_N, 4),
        (2, Key.IN_REF, 1),
        (2, Key.OUT_INHERIT, 1),
        (3, Key.IN_REF, 2),
        (3, Key.OUT_INHERIT, 1),
    ]
    row = _assemble(slots, 4)
    assert row[2, M["act_nonfinite"]] == 1 and row[3, M["act_nonfinite"]] == 1
    assert row[3, M["in_nonfinite"]] == 1
    assert np.isnan(row[3, M["act_mean"]])


def test_one_thread_for_small_cpu_tensors_only_and_restored():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with S.one_thread(torch.ones(10)):
            assert torch.get_num_threads() == 2  # runs inline anyway: no switch
        with S.one_thread(torch.ones(S.GRAIN), None):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with S.one_thread(torch.ones(10), torch.ones(S.SMALL)):
            assert torch.get_num_threads() == 2  # a large tensor keeps the threads
        with pytest.raises(KeyError):
            with S.one_thread(torch.ones(S.GRAIN)):
                raise KeyError("restored on errors too")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    # The rule itself, as the hooks ask it inline.
    assert S.one_thread_pays(None, torch.ones(S.GRAIN)) and not S.one_thread_pays(None, None)
    assert not S.one_thread_pays(torch.ones(S.GRAIN), torch.empty(S.GRAIN, device="meta"))
    assert not S.one_thread_pays(torch.ones(S.GRAIN - 1), torch.ones(8))


def test_saturated_top_end_only():
    y = torch.tensor([0.0, 0.0, 3.0, 6.0, 6.0, 5.99])
    assert int(S.saturated(y, None, 6.0)) == 2
    assert int(S.saturated(y, 0.0, 6.0)) == 4


def test_assemble_output_gradient_flag_and_exact_count():
    row = _assemble(
        [
            (1, Key.GOUT_SUM, 3.0),
            (2, Key.GOUT_SUM, math.nan),
            (3, Key.GOUT_SUM, math.inf),
            (3, Key.GOUT_NF, 17.0),
        ],
        5,
    )
    assert list(row[:, M["gout_nonfinite"]][1:4]) == [0, 1, 17]
    assert np.isnan(row[0, M["gout_nonfinite"]]) and np.isnan(row[4, M["gout_nonfinite"]])


def test_assemble_resolves_a_long_chain_of_inherited_flags():
    # Row 1 measured (non-finite), rows 2..13 pointwise modules on a cheap
    # step: each one's input is the previous row's output, its flag inherited.
    slots = [(1, Key.OUT_SUM, math.nan), (1, Key.OUT_N, 4)]
    for r in range(2, 14):
        slots += [(r, Key.IN_REF, r - 1), (r, Key.OUT_INHERIT, 1), (r, Key.OUT_N, 4)]
    row = _assemble(slots, 14)
    assert (row[2:14, M["act_nonfinite"]] == 1).all() and (row[2:14, M["in_nonfinite"]] == 1).all()


def test_gradient_norms_propagate_nonfinite_values_and_overflow():
    # The every-step non-finite check reads the gradient norms: NaN and inf
    # must reach them, and so must an overflow of the sum of squares.
    bad = torch.randn(512, 128)
    bad[3, 4] = math.nan
    worse = torch.randn(512, 128)
    worse[0, 0] = math.inf
    fine = torch.randn(512, 128)
    n_nan, n_inf, n_fine = S.foreach_norm([bad, worse, fine])
    assert math.isnan(float(n_nan)) and math.isinf(float(n_inf))
    assert float(n_fine) == pytest.approx(float(fine.double().norm()), rel=1e-5)
    assert math.isinf(float(S.foreach_norm([torch.full((S.GRAIN + 1,), 1e20)])[0]))


def test_assemble_takes_the_last_slot_of_a_single_key_and_sums_the_others():
    L = 3
    values = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    rows = np.array([1, 1, 1, 1, 2])
    keys = np.array([Key.VALUE, Key.VALUE, Key.GRAD_NORM, Key.GRAD_NORM, Key.GRAD_NORM])
    row = S.assemble(values, rows, keys, L)
    M = metadata.METRIC_INDEX
    assert row[1, M["value"]] == 2.0  # the later slot
    assert row[1, M["grad_norm"]] == pytest.approx(5.0)  # sqrt(3^2 + 4^2)
    assert row[2, M["grad_norm"]] == 5.0 and np.isnan(row[0, M["grad_norm"]])


def _random_step_slots(rng, L, n_slots):
    """Slots of every key on random rows (repeats included), an input
    reference pointing to an earlier row, GOUT_CLEAN on some rows."""
    rows = rng.integers(0, L, n_slots)
    keys = rng.integers(0, Key.COUNT, n_slots)
    keys[keys == Key.HIST] = Key.VALUE
    ref = (keys == Key.IN_REF) & (rows == 0)
    rows[ref] = 1  # (row 0 has no earlier row)
    return rows, keys


def _random_values(rng, rows, keys):
    v = rng.standard_normal(len(rows)) * 10.0 ** rng.integers(-3, 4, len(rows))
    v[rng.random(len(v)) < 0.1] = np.nan
    v[rng.random(len(v)) < 0.05] = np.inf
    counts = np.isin(keys, [Key.OUT_N, Key.IN_N, Key.OUT_UNITS, Key.IN_UNITS])
    v[counts] = rng.integers(1, 100, counts.sum())
    ref = keys == Key.IN_REF
    v[ref] = [rng.integers(0, r) for r in rows[ref]]
    clean = keys == Key.GOUT_CLEAN
    v[clean] = 1.0
    nf = np.isin(keys, [Key.OUT_NF, Key.IN_NF, Key.GOUT_NF, Key.GRAD_NF])
    v[nf] = np.where(rng.random(nf.sum()) < 0.8, 0.0, 2.0)
    return v


@pytest.mark.parametrize("seed", range(6))
def test_assembling_steps_together_gives_each_steps_own_row(seed):
    rng = np.random.default_rng(seed)
    L = int(rng.integers(2, 12))
    rows, keys = _random_step_slots(rng, L, int(rng.integers(0, 80)))
    layout = S.SlotLayout(rows, keys, L)
    values = [_random_values(rng, rows, keys) for _ in range(int(rng.integers(1, 9)))]
    if seed % 2:  # steps whose evidence is clean: their unread output gradients are implied 0
        for v in values:
            v[~np.isfinite(v)] = 1.0
            v[np.isin(keys, [Key.OUT_NF, Key.IN_NF, Key.GOUT_NF, Key.GRAD_NF])] = 0.0
    together = S.assemble_steps(np.stack(values), layout)
    for i, v in enumerate(values):
        alone = S.assemble(v, rows, keys, L)
        np.testing.assert_array_equal(together[i], alone)
        np.testing.assert_array_equal(alone, S.assemble(v, rows, keys, L, layout))


def test_row_assembler_reuses_a_layout_only_for_the_same_rows_and_keys():
    from tb_neuraldbg.training.step.collector import StepPacket
    from tb_neuraldbg.training.step.rows import LAYOUTS, RowAssembler

    rng = np.random.default_rng(0)
    L = 6
    kinds = [
        (np.array([0, 1, 2, 3, 2]), np.array([Key.VALUE, Key.VALUE, Key.GRAD_NORM, Key.GRAD_NORM, Key.GRAD_NORM])),
        (np.array([5, 1, 2, 3, 2]), np.array([Key.VALUE, Key.VALUE, Key.GRAD_NORM, Key.GRAD_NORM, Key.GRAD_NORM])),
        (np.array([0, 1, 2, 3, 2]), np.array([Key.VALUE, Key.OUT_N, Key.GRAD_NORM, Key.WEIGHT_NORM, Key.GRAD_NORM])),
    ]
    assembler = RowAssembler()
    for step in range(3 * LAYOUTS):  # kinds alternate, and more layouts than kept
        rows, keys = kinds[step % 3] if step < 2 * LAYOUTS else (rng.integers(0, L, 5), kinds[0][1])
        values = rng.standard_normal(5)
        packet = StepPacket(step=step, rows=rows.copy(), keys=keys.copy(), layers=[], stats=False)
        got = assembler.row(packet, values, L)
        np.testing.assert_array_equal(got, S.assemble(values, rows, keys, L))
        assert len(assembler.layouts) <= LAYOUTS
    assert assembler.layout(StepPacket(0, kinds[0][0], kinds[0][1], [], False), L) is \
        assembler.layout(StepPacket(1, kinds[0][0].copy(), kinds[0][1].copy(), [], False), L)
    with pytest.raises(ValueError, match="read-only"):
        assembler.layout(StepPacket(0, kinds[0][0], kinds[0][1], [], False), L).present[0, 0] = False


def test_row_assembler_assembles_a_large_layout_a_few_steps_at_a_time(monkeypatch):
    from tb_neuraldbg.training.step import rows as rows_module
    from tb_neuraldbg.training.step.collector import StepPacket

    rng = np.random.default_rng(3)
    L = 9
    rows, keys = _random_step_slots(rng, L, 60)
    cheap = [StepPacket(step=s, rows=rows, keys=keys, layers=[], stats=False) for s in range(5)]
    values = [_random_values(rng, rows, keys) for _ in cheap]
    monkeypatch.setattr(rows_module, "TOGETHER", 2 * Key.COUNT * L)  # two steps a call
    calls = []
    real = S.assemble_steps
    monkeypatch.setattr(rows_module.slots, "assemble_steps", lambda v, layout: calls.append(len(v)) or real(v, layout))
    got = rows_module.RowAssembler().assembled(cheap, values, [L] * len(cheap))
    assert calls == [2, 2, 1]
    for row, v in zip(got, values):
        np.testing.assert_array_equal(row, real(v[None], S.SlotLayout(rows, keys, L))[0])


def test_collector_stacks_in_chunks_and_keeps_each_value_with_its_row_and_key():
    from tb_neuraldbg.training.step.collector import CHUNK, Collector

    col = Collector()
    n = 3 * CHUNK + 7
    for i in range(n):  # floats and int32 counts interleaved, as a full step adds them
        if i % 3 == 2:
            col.add(torch.tensor(i, dtype=torch.int32), i, i % Key.COUNT)
        else:
            col.add_row(i, [i % Key.COUNT], [torch.tensor(float(i))])
        # stacked as they come: never more than a chunk of 0-d values held
        assert len(col.by_device[torch.device("cpu")][0]) < CHUNK
    host, rows, keys = col.finish()
    values = np.concatenate(host)
    assert len(values) == len(rows) == len(keys) == n
    assert sorted(rows.tolist()) == list(range(n))
    assert np.array_equal(values, rows.astype(np.float64))  # each value stayed with its row
    assert np.array_equal(keys, rows % Key.COUNT)


@pytest.mark.parametrize("odd", [None, torch.bfloat16], ids=["numpy", "bfloat16-through-torch"])
def test_collector_finish_copies_cpu_runs_of_any_dtype_with_their_rows(odd):
    from tb_neuraldbg.training.step.collector import Collector

    col = Collector()
    runs = [torch.tensor([1.5, 2.5]), torch.tensor([3], dtype=torch.int32),
            torch.tensor([4.25, 5.0], dtype=torch.float64), torch.tensor([6.0], requires_grad=True),
            torch.tensor([2.0 ** 24 + 1], dtype=torch.int64)]  # (exact in float64, not in float32)
    if odd is not None:
        runs.append(torch.tensor([7.0], dtype=odd))
    row = 0
    for t in runs:
        col.add_stacked(t, list(range(row, row + t.numel())), Key.VALUE)
        row += t.numel()
    col.const(row, Key.VALUE, 8.0)
    host, rows, keys = col.finish()
    values = np.concatenate(host)
    want = np.concatenate([t.detach().double().numpy() for t in runs] + [np.array([8.0])])
    order = np.argsort(rows)
    assert np.array_equal(rows[order], np.arange(row + 1)) and (keys == Key.VALUE).all()
    assert np.array_equal(values[order], want)
    runs[0].fill_(-1.0)  # a copy, not a view of the collected tensors
    assert np.array_equal(np.concatenate(host)[order], want)


def test_a_few_cpu_scalars_are_stacked_as_they_were_when_added():
    from tb_neuraldbg.training.step.collector import FEW, Collector

    col = Collector()
    w = torch.tensor(2.0, requires_grad=True)
    added = [w * 3, torch.tensor(7, dtype=torch.int32), torch.tensor(0.5, dtype=torch.bfloat16),
             torch.tensor(True), torch.tensor(1.25, dtype=torch.float16)]
    for i, t in enumerate(added):
        col.add(t, i, Key.VALUE)
    assert len(added) <= FEW
    col.compact()
    kept = torch.tensor(4.0)
    col.add(kept, len(added), Key.VALUE)
    host, rows, keys = col.finish()
    kept.fill_(-1.0)  # changed after the step's end: the step keeps its value
    values = np.concatenate(host)[np.argsort(rows)]
    assert values.tolist() == [6.0, 7.0, 0.5, 1.0, 1.25, 4.0]


def test_grouping_in_cpp_matches_the_python_grouping(monkeypatch):
    ts = [torch.randn(3), torch.randn(2, dtype=torch.float64), torch.randn(4), torch.randn(1, dtype=torch.float64)]
    fast = S._by_device_and_dtype(ts)
    monkeypatch.delattr(torch._C, "_group_tensors_by_device_and_dtype")
    slow = S._by_device_and_dtype(ts)
    assert sorted(idx for idx, _ in fast) == sorted(idx for idx, _ in slow) == [[0, 2], [1, 3]]
    for idx, group in fast:
        assert all(g is ts[i] for i, g in zip(idx, group))
    # one group in order: the norms come straight from one foreach call
    same = [torch.randn(5) for _ in range(4)]
    assert [float(n) for n in S.foreach_norm(same)] == pytest.approx([float(t.norm()) for t in same])


def test_unscaled_norms_stay_finite_where_the_scaled_ones_overflow():
    scale = torch.tensor(2.0**126)  # near a float32 GradScaler's ceiling
    grads = [
        torch.full((1000,), 3.0) * scale,  # values 2.6e38, finite; norm 8e39, not in float32
        torch.full((4,), 1e-3) * scale,  # squares 7e69: not in float32 either
        torch.full((3,), 1e-30) * scale,  # an ordinary norm
        torch.tensor([1.0, math.inf]),  # a real overflow stays one
        torch.tensor([math.nan, 1.0]),
    ]
    assert not torch.isfinite(torch.stack(S.foreach_norm(grads[:2]))).any()  # torch's float32 sums
    out = S.unscaled_norms(grads, scale)
    assert out.dtype == torch.float32 and out.shape == (5,)
    want = [3.0 * math.sqrt(1000), 2e-3, 1e-30 * math.sqrt(3)]
    assert out[:3].tolist() == pytest.approx(want, rel=1e-5)
    assert math.isinf(out[3]) and math.isnan(out[4])


def test_foreach_norm_sums_in_the_dtype_given():
    # (unscaled_norms' formulation on a GPU: float64 sums as the values are read)
    big = [torch.full((10,), 1e20), torch.full((2, 2), 3.0)]
    out = S.foreach_norm(big, dtype=torch.float64)
    assert [n.dtype for n in out] == [torch.float64] * 2
    assert [float(n) for n in out] == pytest.approx([1e20 * math.sqrt(10), 6.0])
    assert math.isinf(float(S.foreach_norm(big)[0]))


def test_a_batch_far_from_zero_keeps_its_spread(tmp_path):
    """Sensor readings at 2e4 +- 1: the sum of squares less the squared sum
    loses the whole spread in float32 (std 0: a "constant" batch); the
    batch's std is taken by torch itself (Key.OUT_STD)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(12), torch.nn.Linear(12, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    with DebugWriter(str(tmp_path)) as w:
        w.watch(model, optimizer=opt, criterion=torch.nn.MSELoss())
        for _ in range(20):
            z = torch.randn(128, 12, generator=g)
            loss = torch.nn.functional.mse_loss(model(2.0e4 + z), z[:, :1])
            opt.zero_grad()
            loss.backward()
            opt.step()
    run = read_run(str(tmp_path))
    batch = list(run.layer_names).index("<input>")
    assert run.stats[0, batch, M["act_std"]] == pytest.approx(1.0, rel=0.05)
    assert not any(e["kind"] == "data_anomaly" for e in diagnose_run(run).to_report()["events"])
