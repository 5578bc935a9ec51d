"""A module whose output is no ordinary dense tensor (sparse COO or CSR,
nested, quantised, on the meta device) is skipped as a module with a
non-float output is, said once in a short warning that names it; the rest of
the model stays watched, and a NaN born later is found where it is born, on
full steps, cheap steps (the replay) and with a sparse tensor among the
model's own outputs."""

import warnings

import numpy as np
import pytest
import torch
from torch import nn

from tb_neuraldbg import DebugWriter, metadata
from tb_neuraldbg.offline.reader import read_run
from tests.test_replay_state import Bomb

torch.set_num_threads(1)
M = metadata.METRIC_INDEX

PLAN = (4, 10)  # the NaN's steps: a cheap one (replayed) and a full one (stats_every=5)
STEPS = 14

_TO = {
    "sparse_coo": lambda x: x.to_sparse(),
    "sparse_csr": lambda x: x.to_sparse_csr(),
    "nested": lambda x: torch.nested.as_nested_tensor(list(x.unbind(0))),
}
_BACK = {
    "sparse_coo": lambda x: x.to_dense(),
    "sparse_csr": lambda x: x.to_dense(),
    "nested": lambda x: x.to_padded_tensor(0.0),
}


class Convert(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class Adjacency(nn.Module):
    def forward(self, h):
        return (h @ h.T).relu().to_sparse()


class WithSparseOutput(nn.Module):
    """A graph model's style: it returns a sparse adjacency (which requires
    grad) with the logits."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.adj = Adjacency()
        self.body = nn.Sequential(nn.ReLU(), Bomb(8), nn.Linear(8, 2))

    def forward(self, x):
        h = self.embed(x)
        return self.adj(h), self.body(h)


def _fit(model, bomb, logdir, pick=lambda out: out, by_hand=False):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    crit = nn.CrossEntropyLoss()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with DebugWriter(logdir) as w:
            handle = w.watch(model, optimizer=opt, criterion=crit, stats_every=5)
            g = torch.Generator().manual_seed(0)
            for step in range(STEPS):
                bomb.armed = step in PLAN
                x, y = torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)
                opt.zero_grad()
                out = pick(model(x))
                (nn.functional.cross_entropy(out, y) if by_hand else crit(out, y)).backward()
                for p in model.parameters():
                    p.grad.nan_to_num_(0.0, 0.0, 0.0)
                opt.step()
    said = [str(c.message) for c in caught if "tb_neuraldbg" in str(c.message)]
    return handle.instrument, said, read_run(logdir)


def _born_in(run, layer):
    births = [(e["step"], e["layer"]) for e in run.events if "born inside this module" in e["message"]]
    assert births == [(step, layer) for step in PLAN], run.events
    assert run.diagnosis["root_cause"]["layer"] == layer
    row = run.layer_names.index(layer)
    for step in PLAN:
        i = list(run.steps).index(step)
        assert run.stats[i, row, M["act_nonfinite"]] == 1 and run.stats[i, row, M["in_nonfinite"]] == 0


@pytest.mark.parametrize("kind", ["sparse_coo", "sparse_csr", "nested"])
def test_a_module_returning_a_sparse_tensor_is_skipped_and_the_rest_watched(kind, tmp_path):
    torch.manual_seed(0)
    to, back = Convert(_TO[kind]), Convert(_BACK[kind])
    model = nn.Sequential(nn.Linear(4, 8), to, back, nn.ReLU(), Bomb(8), nn.Linear(8, 2))
    inst, said, run = _fit(model, model[4], str(tmp_path))
    notes = [s for s in said if "returns a" in s]
    assert len(notes) == 1 and "'1' (Convert)" in notes[0] and kind in notes[0] and len(notes[0]) < 200, said
    assert not [s for s in said if "failed and is switched off" in s], said
    assert inst.mode == "replay" and inst.replays == len(PLAN)
    _born_in(run, "4")
    full = list(run.steps).index(5)
    names = run.layer_names
    assert np.isnan(run.stats[full, names.index("1"), M["act_mean"]])  # skipped
    for layer in ("0", "2", "3", "4", "5"):  # the rest measured
        assert np.isfinite(run.stats[full, names.index(layer), M["act_mean"]]), layer
    assert np.isnan(run.stats[full, names.index("2"), M["in_nonfinite"]])  # (its input is sparse)


@pytest.mark.parametrize("by_hand", [False, True], ids=["criterion", "loss_by_hand"])
def test_a_sparse_tensor_among_the_models_outputs_leaves_the_replay_working(by_hand, tmp_path):
    """The replay follows the model's outputs: the criterion's call on one of
    them, or (a loss by hand) the gradients the backward sent into them."""
    torch.manual_seed(0)
    model = WithSparseOutput()
    inst, said, run = _fit(model, model.body[1], str(tmp_path), pick=lambda out: out[1], by_hand=by_hand)
    notes = [s for s in said if "returns a" in s]
    assert len(notes) == 1 and "'adj' (Adjacency)" in notes[0], said
    assert not [s for s in said if "failed" in s or "cannot be replayed" in s], said
    assert inst.mode == "replay" and inst.replays == len(PLAN)
    _born_in(run, "body.1")


def test_what_is_not_dense():
    from tb_neuraldbg.training.modules import not_dense

    x = torch.randn(3, 4)
    assert not_dense(x) is None
    assert not_dense(x.to_sparse()) == "sparse_coo"
    assert not_dense(x.to_sparse_csr()) == "sparse_csr"
    assert not_dense(torch.empty(3, device="meta")) == "meta"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (nested tensors are a prototype; quantised ones deprecated)
        assert not_dense(torch.nested.as_nested_tensor([x, x])) == "nested"
        assert not_dense(torch.quantize_per_tensor(x, 0.1, 0, torch.qint8)) == "quantized"


class SparseIn(nn.Module):
    """Takes a sparse batch (bag-of-words features)."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 8) / 2)

    def forward(self, x):
        return torch.sparse.mm(x, self.weight)


def test_a_sparse_batch_is_not_measured_and_the_model_is(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(SparseIn(), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    crit = nn.CrossEntropyLoss()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with DebugWriter(str(tmp_path)) as w:
            w.watch(model, optimizer=opt, criterion=crit)
            for _ in range(3):
                x = (torch.rand(8, 4) > 0.5).float().to_sparse()
                opt.zero_grad()
                crit(model(x), torch.randint(0, 2, (8,))).backward()
                opt.step()
    assert not [str(c.message) for c in caught if "tb_neuraldbg" in str(c.message)]
    run = read_run(str(tmp_path))
    assert np.isnan(run.stats[0, run.layer_names.index("<input>"), M["act_mean"]])
    assert np.isfinite(run.stats[0, run.layer_names.index("0"), M["act_mean"]])


def test_a_hook_failure_is_said_in_one_short_line():
    from tb_neuraldbg.training.hooks.guard import HookGuard

    def fails():
        raise NotImplementedError("Could not run 'aten::op' with arguments from the 'SparseCPU' backend.\n"
                                  + "\n".join(f"Backend{i}: registered at somewhere.cpp" for i in range(300)))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        HookGuard().run("forward", fails)
    (said,) = [str(c.message) for c in caught]
    assert "SparseCPU" in said and "Backend1" not in said and len(said) < 400
