"""The heatmap binning rule (docs/API.md), against hand cases and a plain
loop reference implementation."""

import math

import numpy as np
import pytest

from tb_neuraldbg import metadata
from tb_neuraldbg.format import binning as heatmap

H = metadata.STATE_CODE["healthy"]
EXPL = metadata.STATE_CODE["exploding"]
NONF = metadata.STATE_CODE["nonfinite"]
NOGRAD = metadata.STATE_CODE["no_gradient"]
VAN = metadata.STATE_CODE["vanishing"]
UNK = metadata.STATE_UNKNOWN


def reference(steps, values, states, max_cols, metric):
    """The rule written as plainly as possible, one cell at a time."""
    n, num_layers = states.shape
    cols = min(max_cols, n)
    bounds = [(c * n) // cols for c in range(cols)] + [n]
    out_v = np.full((num_layers, cols), np.nan, np.float32)
    out_s = np.full((num_layers, cols), UNK, np.uint8)
    for c in range(cols):
        lo, hi = bounds[c], bounds[c + 1]
        for l in range(num_layers):
            codes = [int(states[i, l]) for i in range(lo, hi)]
            worst = metadata.worst_state(codes)
            out_s[l, c] = worst
            if metric == heatmap.STATE_METRIC:
                out_v[l, c] = worst
                continue
            if metadata.state_rank(worst) > metadata.state_rank(H):
                first = next(i for i in range(lo, hi) if states[i, l] == worst)
                out_v[l, c] = values[first, l]
                continue
            best, best_score = math.nan, -math.inf
            for i in range(lo, hi):
                v = float(values[i, l])
                if math.isnan(v):
                    continue
                if math.isinf(v):
                    score = math.inf
                elif metric in heatmap.MAX_RULE_METRICS:
                    score = v
                elif v == 0:
                    score = 1e30
                else:
                    score = abs(math.log10(abs(v)))
                if score > best_score:
                    best, best_score = v, score
            out_v[l, c] = best
    starts = np.array(bounds[:-1])
    ends = np.array(bounds[1:]) - 1
    return steps[starts], steps[ends], out_v, out_s


def one_layer(values, states, max_cols, metric="grad_norm"):
    steps = np.arange(len(states)) * 10
    hm = heatmap.bin_heatmap(
        steps,
        None if values is None else np.array(values, np.float32)[:, None],
        np.array(states, np.uint8)[:, None],
        max_cols,
        metric,
    )
    return hm.values[0], hm.states[0]


def test_lone_failing_step_in_wide_bin_survives():
    n = 10_000
    values = np.full(n, 0.01, np.float32)
    states = np.zeros(n, np.uint8)
    values[7777], states[7777] = 5e6, EXPL
    v, s = one_layer(values, states, 1)
    assert s.tolist() == [EXPL]
    assert v.tolist() == [np.float32(5e6)]
    v, s = one_layer(values, states, 3)
    assert s.tolist() == [H, H, EXPL]
    assert v[2] == np.float32(5e6)


def test_failing_bin_takes_value_at_first_step_of_the_worst_state():
    # Exploding (rank 60) twice, then no_gradient (50) with a more extreme value:
    # the bin shows exploding, with the value of its first occurrence.
    v, s = one_layer([0.01, 1e3, 1e4, 1e-9, 0.01], [H, EXPL, EXPL, NOGRAD, H], 1)
    assert s.tolist() == [EXPL]
    assert v.tolist() == [np.float32(1e3)]


def test_worst_state_uses_rank_not_code():
    # nonfinite (code 3) outranks no_gradient (code 4); vanishing (1) < dead (5).
    _, s = one_layer([1, 1], [NOGRAD, NONF], 1)
    assert s.tolist() == [NONF]
    _, s = one_layer([1, 1], [metadata.STATE_CODE["dead"], VAN], 1)
    assert s.tolist() == [metadata.STATE_CODE["dead"]]


def test_nonfinite_value_kept_when_state_selects_it():
    v, s = one_layer([0.01, np.nan, 0.01], [H, NONF, H], 1)
    assert s.tolist() == [NONF] and np.isnan(v[0])


@pytest.mark.parametrize(
    "values, expected",
    [
        ([1.0, 1e-6, 1e3], 1e-6),  # |log10| 6 beats 3
        ([1.0, -1e-6, 1e3], -1e-6),  # sign kept, distance uses |v|
        ([1e-6, 0.0, 1e3], 0.0),  # zero is farthest from 1 among finite values
        ([0.0, np.inf, 1e-30], np.inf),  # non-finite wins over finite
        ([1e3, -np.inf, np.inf], -np.inf),  # first non-finite wins
        ([np.nan, 2.0, np.nan], 2.0),  # NaN = not measured: any value beats it
        ([np.nan, np.nan], np.nan),  # no measurement at all
        ([0.5, 2.0], 0.5),  # tie |log10 0.5| == |log10 2|: earliest step
    ],
)
def test_healthy_bin_extreme_on_log_scale(values, expected):
    v, s = one_layer(values, [H] * len(values), 1)
    assert s.tolist() == [H]
    np.testing.assert_array_equal(v, np.float32([expected]))


@pytest.mark.parametrize(
    "values, expected",
    [([0.1, 0.9, 0.5], 0.9), ([0.0, 0.0], 0.0), ([1.0, np.inf], np.inf), ([np.nan, 0.2], 0.2)],
)
def test_fractions_and_counts_take_the_maximum(values, expected):
    v, _ = one_layer(values, [H] * len(values), 1, metric="act_dead_frac")
    np.testing.assert_array_equal(v, np.float32([expected]))


def test_unknown_states_fall_back_to_values_and_stay_unknown_when_alone():
    v, s = one_layer([np.nan, 3.0, 1e-4], [UNK, UNK, H], 1)
    assert s.tolist() == [H] and v[0] == np.float32(1e-4)
    v, s = one_layer([np.nan, np.nan], [UNK, UNK], 1)
    assert s.tolist() == [UNK] and np.isnan(v[0])
    v, s = one_layer([np.nan, 5.0], [UNK, UNK], 2)
    assert s.tolist() == [UNK, UNK] and np.isnan(v[0]) and v[1] == 5.0


def test_undefined_state_codes_count_as_unknown():
    _, s = one_layer([1.0, 1.0], [200, H], 1)
    assert s.tolist() == [H]


def test_state_metric_values_are_the_state_codes():
    v, s = one_layer(None, [H, EXPL, H, UNK], 2, metric="state")
    assert s.tolist() == [EXPL, H]
    assert v.tolist() == [float(EXPL), float(H)]


def test_bins_and_column_bounds():
    assert heatmap.bin_bounds(10, 3).tolist() == [0, 3, 6]
    assert heatmap.bin_bounds(10, 20).tolist() == list(range(10))
    with pytest.raises(ValueError):
        heatmap.bin_bounds(10, 0)
    steps = np.array([0, 5, 7, 100, 101, 250, 251])
    hm = heatmap.bin_heatmap(steps, np.ones((7, 2)), np.zeros((7, 2), np.uint8), 3, "grad_norm")
    assert hm.col_start.tolist() == [0, 7, 101]
    assert hm.col_end.tolist() == [5, 100, 251]
    assert hm.values.shape == (2, 3) and hm.states.shape == (2, 3)


def test_no_steps_gives_no_columns():
    hm = heatmap.bin_heatmap(np.zeros(0), np.zeros((0, 4)), np.zeros((0, 4), np.uint8), 10, "grad_norm")
    assert hm.values.shape == (4, 0) and hm.col_start.shape == (0,)


def test_shape_mismatch_is_a_value_error():
    with pytest.raises(ValueError):
        heatmap.bin_heatmap(np.arange(3), np.ones((3, 2)), np.zeros((3, 3), np.uint8), 2, "grad_norm")


@pytest.fixture(params=["whole", "bin by bin"])
def chunks(request, monkeypatch):
    """Bins binned in one chunk (these matrices are small) or one at a time."""
    if request.param != "whole":
        monkeypatch.setattr(heatmap, "_CHUNK_CELLS", 1)
    return request.param


@pytest.mark.parametrize("metric", ["grad_norm", "act_zero_frac", "state"])
@pytest.mark.parametrize("n, cols", [(1, 1), (7, 3), (50, 7), (64, 64), (97, 10), (30, 1000), (400, 37)])
def test_matches_reference_on_random_data(metric, n, cols, chunks):
    rng = np.random.default_rng(n * 1000 + cols)
    num_layers = 5
    values = (10.0 ** rng.uniform(-8, 8, (n, num_layers))).astype(np.float32)
    values *= rng.choice([-1, 1], values.shape)
    special = rng.random((n, num_layers))
    values[special < 0.05] = np.nan
    values[(special >= 0.05) & (special < 0.08)] = np.inf
    values[(special >= 0.08) & (special < 0.1)] = 0
    values[(special >= 0.1) & (special < 0.12)] = -np.inf
    codes = np.array([H] * 20 + [EXPL, NONF, NOGRAD, VAN, UNK, 200], np.uint8)
    states = rng.choice(codes, (n, num_layers)).astype(np.uint8)
    steps = np.cumsum(rng.integers(1, 5, n))
    got = heatmap.bin_heatmap(steps, values, states, cols, metric)
    want = reference(steps, values, states, cols, metric)
    np.testing.assert_array_equal(got.col_start, want[0])
    np.testing.assert_array_equal(got.col_end, want[1])
    np.testing.assert_array_equal(got.values, want[2])
    np.testing.assert_array_equal(got.states, want[3])


@pytest.mark.parametrize("metric", ["grad_norm", "act_mean", "act_dead_frac", "state"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_reference_when_few_bins_mix(metric, seed, chunks):
    """Mostly steady layers (the common case, looked at bin by bin only where
    codes mix or signs and distances tie): same answers as the reference."""
    rng = np.random.default_rng(seed)
    n, num_layers, cols = 600, 7, 53
    values = (10.0 ** rng.uniform(-3, 3, (n, num_layers))).astype(np.float32)
    values[:, 1] *= -1  # a layer of negative values
    values[:100, 2] *= rng.choice([-1, 1], 100)  # a layer of both signs at first
    values[rng.random((n, num_layers)) < 0.01] = np.nan
    values[:, 3] = 2.0
    values[5::17, 3] = 0.5  # as far from 1 as 2.0: the first of them wins
    values[::29, 4] = -values[::29, 4] * 0  # zeros
    values[100::50, 5] = np.inf
    values[120::50, 5] = -np.inf
    values[:50, 6] = np.nan  # a layer not measured at first
    states = np.zeros((n, num_layers), np.uint8)
    states[rng.integers(0, n, 6), rng.integers(0, num_layers, 6)] = EXPL
    states[300:, 0] = VAN
    states[310:, 0] = NONF
    states[:40, 6] = UNK
    steps = np.arange(n) * 3
    got = heatmap.bin_heatmap(steps, values, states, cols, metric)
    want = reference(steps, values, states, cols, metric)
    np.testing.assert_array_equal(got.values, want[2])
    np.testing.assert_array_equal(got.states, want[3])


@pytest.mark.parametrize("metric", ["grad_norm", "act_dead_frac"])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_reference_without_negative_values(metric, seed, chunks):
    """Norms and fractions (no value below zero, the common case, taken
    without the sign logic): zeros, +inf, NaN, -0.0 and values equally far
    from 1 on either side, as the reference has them."""
    rng = np.random.default_rng(seed)
    n, num_layers, cols = 500, 6, 47
    values = (10.0 ** rng.uniform(-4, 4, (n, num_layers))).astype(np.float32)
    special = rng.random((n, num_layers))
    values[special < 0.03] = np.nan
    values[(special >= 0.03) & (special < 0.05)] = 0
    values[(special >= 0.05) & (special < 0.06)] = -0.0
    values[(special >= 0.06) & (special < 0.07)] = np.inf
    values[:, 2] = 4.0
    values[3::11, 2] = 0.25  # as far from 1 as 4.0
    values[:, 3] = 1.0
    values[:200, 4] = np.nan  # not measured for a while
    states = np.zeros((n, num_layers), np.uint8)
    states[rng.integers(0, n, 8), rng.integers(0, num_layers, 8)] = EXPL
    states[250:, 5] = VAN
    steps = np.arange(n)
    got = heatmap.bin_heatmap(steps, values, states, cols, metric)
    want = reference(steps, values, states, cols, metric)
    np.testing.assert_array_equal(got.values, want[2])
    np.testing.assert_array_equal(got.states, want[3])
    assert np.array_equal(np.signbit(got.values), np.signbit(want[2]))


@pytest.mark.parametrize("values, expected", [
    ([2.0, 0.5], 2.0), ([0.5, 2.0], 0.5), ([-3.0, 3.0], -3.0), ([3.0, -3.0], 3.0),
    ([-0.1, 0.1, 5.0], -0.1), ([0.1, -0.1], 0.1), ([-np.inf, np.inf], -np.inf), ([1.0, -np.inf, 1e30], -np.inf),
])
def test_ties_go_to_the_earliest_step(values, expected):
    v, _ = one_layer(values, [H] * len(values), 1)
    assert v.tolist() == [np.float32(expected)]
