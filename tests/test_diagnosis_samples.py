"""Whether a layer's output still differs between samples (issue #42):
``sample_spread`` as the writer records it (its exact definition on small
tensors, its NaN guards) and the samples aspect (diagnosis/aspects/samples.py):
the first module whose output lost the sample while its input kept it,
once the model's output lost it too, is
``activation_collapse``; a quiet branch while the output still depends on
the input, an output the same for every sample from the start (a
positional embedding), and a head with no spread yet stay silent."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from tb_neuraldbg import DebugWriter
from tb_neuraldbg.diagnosis import Engine
from tb_neuraldbg.diagnosis.explain import value_label
from tb_neuraldbg.offline.reader import read_run
from tb_neuraldbg.training.step import stats
from tb_neuraldbg.training.step.slots import Key, assemble
from tests.test_diagnosis import M, Run, failures, feed


def _sample_spread(x: torch.Tensor) -> float:
    """The writer's slots for one output ``x`` assembled into its row's sample_spread."""
    keys = [Key.OUT_N, Key.OUT_SUM, Key.OUT_NORM, Key.SAMPLE_SUMS, Key.SAMPLES]
    vals = [x.numel(), float(x.sum()), float(torch.linalg.vector_norm(x)), float(stats.sums_norm(x, 0)),
            x.shape[0]]
    row = assemble(np.array(vals, dtype=np.float64), np.zeros(len(keys), np.int64), np.array(keys), 1)
    return float(row[0, M["sample_spread"]])


def _by_definition(x: np.ndarray) -> float:
    total = ((x - x.mean()) ** 2).sum()
    between = ((x - x.mean(axis=0, keepdims=True)) ** 2).sum()
    return math.sqrt(between / total)


def test_sample_spread_is_its_documented_definition():
    x = torch.tensor([[1.0, 2.0, 3.0], [2.0, 0.0, 5.0], [0.5, 1.0, 4.0]])
    assert _sample_spread(x) == pytest.approx(_by_definition(x.numpy()), rel=1e-5)
    maps = torch.randn(4, 3, 5, 5, generator=torch.Generator().manual_seed(0)) + torch.randn(1, 3, 5, 5)
    assert _sample_spread(maps) == pytest.approx(_by_definition(maps.numpy()), rel=1e-4)


def test_samples_that_all_give_the_same_output_have_no_sample_spread():
    same = torch.tensor([[1.0, -2.0, 3.0]]).expand(8, 3).contiguous()
    assert _sample_spread(same) == pytest.approx(0.0, abs=1e-3)
    # samples that differ only by an offset common to every unit: all their spread is between samples
    offsets = torch.arange(6.0)[:, None].expand(6, 4).contiguous()
    assert _sample_spread(offsets) == pytest.approx(1.0, rel=1e-6)


def test_one_sample_and_a_constant_output_are_nan():
    assert math.isnan(_sample_spread(torch.tensor([[1.0, 2.0, 3.0]])))  # B = 1: nothing to differ from
    assert math.isnan(_sample_spread(torch.full((4, 3), 2.5)))  # no spread at all (act_std says so)


class _ZeroThenBias(nn.Module):
    """A Linear whose weights are 0: its output is its bias, the same for every sample."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)
        with torch.no_grad():
            self.lin.weight.zero_()
            self.lin.bias.copy_(torch.tensor([1.0, -1.0, 2.0, 0.5]))

    def forward(self, x):
        return self.lin(x)


def test_the_writer_records_sample_spread_for_modules_and_the_batch(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), _ZeroThenBias(), nn.Linear(4, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with DebugWriter(str(tmp_path)) as w:
        w.watch(model, optimizer=opt, criterion=nn.CrossEntropyLoss())
        x, t = torch.randn(16, 8), torch.randint(0, 3, (16,))
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), t).backward()
        opt.step()
    run = read_run(str(tmp_path))
    names = list(run.layer_names)
    ss = run.stats[0, :, M["sample_spread"]]
    assert ss[names.index("<input>")] == pytest.approx(_by_definition(x.numpy()), rel=1e-4)
    assert ss[names.index("0")] == pytest.approx(_by_definition(model[0](x).detach().numpy()), rel=1e-4)
    assert ss[names.index("1.lin")] < 1e-3  # its bias, the same for every sample
    assert math.isnan(ss[names.index("<loss>")])


# ------------------------------------------------------------------ the aspect


class SampleRun(Run):
    """:class:`Run` with each module's sample spread on full steps: a
    healthy MLP whose outputs differ between samples (~0.9 of their spread)."""

    def row(self, step):
        r = super().row(step)
        if self.full(step):
            for k in range(0, len(self.layers) - 2):
                r[k, M["sample_spread"]] = 0.9 + 0.05 * self.rng.random()
        return r


def _shrink(run, rows, start, factor):
    """A plant that multiplies ``rows``' outputs (their std) by ``factor`` from ``start``."""

    def plant(step, r):
        if run.full(step) and step >= start:
            for name in rows:
                k = run.i(name)
                r[k, M["act_std"]] *= factor
                r[k, M["act_absmax"]] *= factor
    return plant


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_healthy_run_with_sample_spreads_is_silent(seed):
    run = SampleRun(seed=seed)
    eng = Engine(run.layers)
    feed(eng, run, range(300))
    assert failures(eng) == []


def test_an_output_that_shrank_to_a_point_is_a_collapse_at_the_first_module_that_lost_the_sample():
    run = SampleRun()
    eng = Engine(run.layers)
    # fc1 onward vary 30x less between samples than at first: fc1 lost it, relu1 and fc2 follow
    feed(eng, run, range(200), _shrink(run, ("fc1", "relu1", "fc2"), 50, 1 / 30))
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("activation_collapse", "fc1", 50)
    ev = next(e for e in eng.events if e.layer == "fc1")
    assert "stopped differing between the samples" in ev.message and "negatives" in ev.message
    assert value_label(ev.kind, ev.layer, ev.extra) == "Sample spread"


def test_an_output_that_grew_a_common_part_while_its_samples_differ_as_before_is_silent():
    """The between-sample share of the head's variance falls 30x because a part
    every sample shares grew 30x, while the samples differ as much as before:
    a language model's logits learning each position's prior (its samples'
    differences are intact), not a collapse."""
    run = SampleRun()

    def plant(step, r):
        if run.full(step) and step >= 40:
            k = run.i("fc2")
            r[k, M["sample_spread"]] /= math.sqrt(30.0)
            r[k, M["act_std"]] *= math.sqrt(30.0)

    eng = Engine(run.layers)
    feed(eng, run, range(200), plant)
    assert failures(eng) == []


def test_a_branch_that_goes_quiet_while_the_output_still_depends_on_the_input_is_silent():
    run = SampleRun()
    eng = Engine(run.layers)
    # fc1 and relu1 go quiet; the output (fc2) varies between samples as much as ever
    feed(eng, run, range(200), _shrink(run, ("fc1", "relu1"), 50, 1 / 30))
    assert not [f for f in failures(eng) if f.kind == "activation_collapse"]


def test_a_fall_of_less_than_an_order_of_magnitude_in_variance_is_silent():
    run = SampleRun()
    eng = Engine(run.layers)
    feed(eng, run, range(200), _shrink(run, ("fc1", "relu1", "fc2"), 50, 1 / 2))
    assert failures(eng) == []


def test_an_output_the_same_for_every_sample_from_the_start_is_not_judged():
    """A positional embedding, a CLS token: its input does not vary with the sample."""
    run = SampleRun()

    def plant(step, r):
        if run.full(step):
            r[run.i("fc0"), M["sample_spread"]] = 1e-3  # the same for every sample, from the first step
            if step >= 50:  # and the model's output lost the sample
                r[run.i("fc2"), M["sample_spread"]] *= 0.1

    eng = Engine(run.layers)
    feed(eng, run, range(200), plant)
    assert not [e for e in failures(eng) if e.layer == "fc0"]
    assert eng.root_cause["layer"] == "fc2"  # the output, the first that lost what it had


def test_a_head_without_spread_at_first_is_judged_from_its_first_spread():
    """A zero-initialised head: NaN at step 0 (no spread), then its output
    grows; its first finite measurement is its reference, and it only grows."""
    run = SampleRun()

    def plant(step, r):
        k = run.i("fc2")
        if step == 0:
            r[k, M["sample_spread"]] = np.nan
            r[k, M["act_std"]] = 0.0
        elif run.full(step):
            r[k, M["act_std"]] *= min(1.0, 0.05 * step)

    eng = Engine(run.layers)
    feed(eng, run, range(200), plant)
    assert failures(eng) == []


def test_an_output_that_passes_through_the_prior_on_the_way_to_learning_is_silent():
    """A classifier whose random initial logits shrink to its prior in its
    first steps (every module from fc1 on varies 30x less), then learns: it
    lost the sample for less time than it had trained before plus lr_window."""
    run = SampleRun()
    eng = Engine(run.layers)
    shrink = _shrink(run, ("fc1", "relu1", "fc2"), 4, 1 / 30)

    def plant(step, r):
        if step < 30:
            shrink(step, r)

    feed(eng, run, range(200), plant)
    assert failures(eng) == []


def test_a_collapse_is_dated_from_the_step_its_root_lost_the_sample():
    """The root lost it at step 40; the output only from step 80 (a VAE's
    means at the prior before its decoder settles on the mean image)."""
    run = SampleRun()
    eng = Engine(run.layers)
    early, late = _shrink(run, ("fc1", "relu1"), 40, 1 / 30), _shrink(run, ("fc2",), 80, 1 / 30)

    def plant(step, r):
        early(step, r)
        late(step, r)

    feed(eng, run, range(200), plant)
    rc = eng.root_cause
    assert (rc["kind"], rc["layer"], rc["step"]) == ("activation_collapse", "fc1", 40)


def test_a_regression_output_that_falls_to_its_targets_spread_is_silent():
    """A random first output that varied 30x more than the targets (MSE: their
    variance recorded) falls to their spread as it learns: it fits them."""
    run = SampleRun()
    eng = Engine(run.layers)
    shrink = _shrink(run, ("fc1", "relu1", "fc2"), 20, 1 / 30)

    def plant(step, r):
        shrink(step, r)
        k = run.i("fc2")
        if run.full(step):
            b = r[k, M["sample_spread"]] * r[k, M["act_std"]]
            r[run.i("<loss>"), M["target_var"]] = (b if step >= 20 else b / 30) ** 2

    feed(eng, run, range(200), plant)
    assert failures(eng) == []


def test_outputs_that_shrink_while_the_loss_stays_where_it_began_are_no_collapse():
    """Every layer's output shrinks 30x (weight decay far too strong) while the
    loss never falls: no objective is met by ignoring the input (the plateau
    rules speak for that run)."""
    run = SampleRun()
    eng = Engine(run.layers)
    shrink = _shrink(run, ("fc0", "relu0", "fc1", "relu1", "fc2"), 20, 1 / 30)

    def plant(step, r):
        shrink(step, r)
        r[run.i("<loss>"), M["value"]] = 1.6 + 0.01 * run.rng.random()

    feed(eng, run, range(200), plant)
    assert not [e for e in failures(eng) if e.kind == "activation_collapse"]


def test_a_last_layer_that_lost_the_sample_while_the_loss_beats_every_constant_is_silent():
    """fc1 onward shrink 30x as in the collapse above, but the loss (~0.5)
    is far below the targets' variance (2.0, MSE): the prediction beats
    every constant, so it still depends on the input and the shrinking rows
    are not what the loss reads (a gated side branch added to the output in
    forward, its gate closing by design)."""
    run = SampleRun()
    eng = Engine(run.layers)
    shrink = _shrink(run, ("fc1", "relu1", "fc2"), 50, 1 / 30)

    def plant(step, r):
        shrink(step, r)
        if run.full(step):
            r[run.i("<loss>"), M["target_var"]] = 2.0

    feed(eng, run, range(200), plant)
    assert not [e for e in failures(eng) if e.kind == "activation_collapse"]
