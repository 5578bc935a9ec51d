"""DDP and FSDP2 under torchrun, two ranks on CPU (gloo), every rank with its
own DebugWriter (tests/ddp_train.py): gradient norms are those the optimizer
applies, a bad batch on rank 1 is blamed on <input> naming rank 1 (never a
layer of the healthy rank 0), a healthy run is healthy, one run per logdir
by default (nothing lost or mixed), one run per rank on request, FSDP2
norms over shards equal the whole parameters'."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tb_neuraldbg import metadata
from tb_neuraldbg.offline.reader import read_logdir

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
M = metadata.METRIC_INDEX
STEPS, BAD = 16, 12

pytestmark = [pytest.mark.slow, pytest.mark.skipif(  # (torchrun: a process a rank)
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(), reason="needs gloo"
)]


def torchrun(logdir, *args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           os.path.join(HERE, "ddp_train.py"), str(logdir), "--steps", str(STEPS), *args]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout + p.stderr


def truth(logdir, rank=0):
    with open(os.path.join(logdir, f"truth_rank{rank}.json")) as f:
        return json.load(f)


def layer_norms(run, truth_steps, prefix=""):
    for layer in ("0", "2", "4"):
        i = run.layer_names.index(layer)
        want = np.array([np.hypot(t[f"{prefix}{layer}.weight"], t[f"{prefix}{layer}.bias"]) for t in truth_steps])
        yield layer, i, want


def report(logdir):
    out = subprocess.run([sys.executable, "-m", "tb_neuraldbg.cli", "report", str(logdir), "--json"],
                         env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("ddp_bad")
    return logdir, torchrun(logdir, "--bad-rank", "1", "--bad-step", str(BAD))


def test_a_bad_batch_on_rank_1_is_blamed_on_input_naming_the_rank(bad):
    logdir, stderr = bad
    (run,) = read_logdir(str(logdir))
    assert run.name == "." and run.num_steps == STEPS  # one run, every step of it
    rc = run.diagnosis["root_cause"]
    assert rc["layer"] == metadata.PSEUDO_INPUT and rc["step"] == BAD and rc["rank"] == 1
    assert rc["message"].startswith("<input> on rank 1:")
    (js,) = report(logdir)["runs"]
    assert js["status"] == "failing" and js["root_cause"]["layer"] == "<input>"
    assert "on rank 1" in js["root_cause"]["message"]
    # No layer of the healthy rank 0 is said to be where the NaN was born.
    for e in run.events:
        if e["severity"] == "error":
            assert e.get("rank") == 1 and "born" not in e["message"].split(";")[0], e
    assert "tb_neuraldbg[rank 0]: step 12, <input>" in stderr


def test_gradient_norms_are_those_after_the_all_reduce(bad):
    logdir, _ = bad
    (run,) = read_logdir(str(logdir))
    t0, t1 = truth(logdir, 0), truth(logdir, 1)
    for layer, i, want in layer_norms(run, t0[:BAD]):
        np.testing.assert_allclose(run.stats[:BAD, i, M["grad_norm"]], want, rtol=1e-5)
        other = [np.hypot(t[f"{layer}.weight"], t[f"{layer}.bias"]) for t in t1[:BAD]]
        np.testing.assert_allclose(other, want, rtol=1e-5)  # the same on both ranks: after the all-reduce


def test_per_rank_blocks_are_stored_and_other_ranks_write_nothing_of_ours(bad):
    logdir, _ = bad
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(logdir), size_guidance={"tensors": 0})
    ea.Reload()
    from tensorboard.util import tensor_util

    blocks = [tensor_util.make_ndarray(e.tensor_proto) for e in ea.Tensors("neuraldbg/ranks")]
    (run,) = read_logdir(str(logdir))
    assert len(blocks) == STEPS and blocks[0].shape == (2, run.num_layers, 12)
    inp = blocks[BAD][:, 0, 6]  # <input>, act_nonfinite
    assert inp[0] == 0 and inp[1] > 0
    # Rank 1's own SummaryWriter call went to rank1/, no neuraldbg data there.
    sub = os.path.join(str(logdir), "rank1")
    ea1 = EventAccumulator(sub)
    ea1.Reload()
    assert ea1.Tags()["scalars"] == ["user/rank"] and not ea1.Tags()["tensors"]
    # Rank 0 saves no batch of its own for rank 1's anomaly.
    assert not [f for f in os.listdir(str(logdir)) if f.endswith(".npz")]


def test_a_healthy_two_rank_run_is_healthy(tmp_path):
    torchrun(tmp_path)
    (run,) = read_logdir(str(tmp_path))
    assert run.diagnosis == {"status": "healthy", "root_cause": None}, run.events
    assert not [e for e in run.events if e["severity"] != "info"]


def test_a_loop_that_never_steps_is_named_on_every_rank_and_closes(tmp_path):
    """Each rank records its step in progress at close (the gather pairs up):
    one row, frozen_weights at <optimizer> (tests/test_never_stepped.py)."""
    torchrun(tmp_path, "--no-step")
    (run,) = read_logdir(str(tmp_path))
    assert run.steps.tolist() == [0]
    assert np.nanmax(run.stats[:, :, M["steps_missing"]]) == STEPS
    rc = run.diagnosis["root_cause"]
    assert (rc["kind"], rc["layer"], rc["step"]) == ("frozen_weights", "<optimizer>", 0)
    assert f"{STEPS} backward passes" in rc["message"]


def test_one_run_per_rank_on_request(tmp_path):
    torchrun(tmp_path, "--ranks", "each", "--bad-rank", "1", "--bad-step", str(BAD))
    runs = {r.name: r for r in read_logdir(str(tmp_path))}
    assert set(runs) == {"rank0", "rank1"}
    for run in runs.values():
        assert run.diagnosis["root_cause"]["layer"] == "<input>" and run.diagnosis["root_cause"]["rank"] == 1
    # Each run holds its own rank's statistics: rank 0's batch was finite.
    nf = {name: run.stats[BAD, 0, M["act_nonfinite"]] for name, run in runs.items()}
    assert nf["rank0"] == 0 and nf["rank1"] > 0
    assert os.listdir(tmp_path / "rank1") and [f for f in os.listdir(tmp_path / "rank1") if f.endswith(".npz")]
    assert not [f for f in os.listdir(tmp_path / "rank0") if f.endswith(".npz")]


def test_fsdp2_norms_over_shards_are_the_whole_parameters(tmp_path):
    pytest.importorskip("torch.distributed.fsdp")
    torchrun(tmp_path, "--fsdp")
    (run,) = read_logdir(str(tmp_path))
    t = truth(tmp_path)
    for _, i, want in layer_norms(run, t):
        np.testing.assert_allclose(run.stats[:, i, M["grad_norm"]], want, rtol=1e-5)
    full = run.steps % 5 == 0  # stats_every=5: weight norms on full steps (and below 5)
    full |= run.steps < 5
    for _, i, want in layer_norms(run, t, prefix="w:"):
        np.testing.assert_allclose(run.stats[full, i, M["weight_norm"]], want[full], rtol=1e-5)
    assert run.diagnosis["status"] == "healthy"
