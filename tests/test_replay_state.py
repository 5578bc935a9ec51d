"""The replay of a non-finite step leaves training as an unwatched run has it
(DESIGN.md, "Runs across processes and signals"): a forward that draws from
numpy's or Python's global generator (LayerDrop), or that counts its calls in
a tensor or a list attribute, is re-run without shifting the user's draws or
the model's state, and the event still names the module where the NaN is
born. A forward that draws from a generator object of its own, whose state
before the step is not kept, is not replayed: the every-step counts take
over, said once."""

import random
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from tb_neuraldbg import DebugWriter, metadata
from tb_neuraldbg.offline.reader import read_run
from tb_neuraldbg.training.hooks import replay_state

torch.set_num_threads(1)
M = metadata.METRIC_INDEX

PLAN = (4, 10)  # steps whose forward plants a NaN: a cheap one, a full one (stats_every=5)
STEPS = 14


class Bomb(nn.Module):
    """A leaf layer (its own weight) whose output gets a NaN while ``armed``."""

    def __init__(self, width=16):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(width, width) / width**0.5)
        self.armed = False

    def forward(self, x):
        y = x @ self.weight
        if self.armed:
            y = y.clone()
            y[0, 0] = float("nan")
        return y


class Drawing(nn.Module):
    """A LayerDrop-like forward: ``fc2`` skipped on a draw and the output
    scaled by another (``numpy``, ``random``, ``generator``: a
    ``np.random.default_rng`` of its own), or scaled by a count of its calls
    kept in a tensor attribute changed in place (``tensor``) or in a list
    (``list``)."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 16)
        self.bomb = Bomb()
        self.head = nn.Linear(16, 3)
        if kind == "tensor":
            self.calls = torch.zeros(())  # no buffer: a plain attribute
        elif kind == "list":
            self.seen = []
        elif kind == "generator":
            self.rng = np.random.default_rng(0)

    def draw(self):
        if self.kind == "numpy":
            return np.random.random(), np.random.uniform(0.5, 1.5)
        if self.kind == "random":
            return random.random(), random.uniform(0.5, 1.5)
        if self.kind == "generator":
            return self.rng.random(), self.rng.uniform(0.5, 1.5)
        if self.kind == "tensor":
            self.calls += 1
            return 1.0, 1.0 + 1e-2 * float(self.calls)
        self.seen.append(len(self.seen))
        return 1.0, 1.0 + 1e-2 * len(self.seen)

    def forward(self, x):
        keep, scale = self.draw()
        h = torch.relu(self.fc1(x))
        if keep > 0.3:
            h = torch.relu(self.fc2(h))
        return self.head(self.bomb(h)) * scale


def _train(kind, logdir=None):
    """STEPS steps of SGD, a NaN planted at PLAN; the user's loop guards its
    weights (nan_to_num on the gradients) and draws from the same generator
    after each step. Returns (parameters, the loop's draws, the handle)."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    model = Drawing(kind)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    writer = DebugWriter(logdir) if logdir else None
    handle = writer.watch(model, optimizer=opt, criterion=crit, stats_every=5) if writer else None
    g = torch.Generator().manual_seed(0)
    draws = []
    try:
        for step in range(STEPS):
            model.bomb.armed = step in PLAN
            x, y = torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g)
            opt.zero_grad()
            crit(model(x), y).backward()
            for p in model.parameters():
                if p.grad is not None:  # (None: fc2 dropped)
                    p.grad.nan_to_num_(0.0, 0.0, 0.0)
            opt.step()
            draws.append((np.random.random(), random.random(), torch.rand(()).item()))
            if kind == "generator":
                draws.append(model.rng.random())
    finally:
        if writer:
            writer.close()
    state = [p.detach().clone() for p in model.parameters()]
    extra = {"tensor": lambda: model.calls.item(), "list": lambda: list(model.seen)}.get(kind, lambda: None)()
    return state, draws, extra, handle


def _bitwise(a, b):
    return len(a) == len(b) and all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(a, b))


@pytest.mark.parametrize("kind", ["numpy", "random", "tensor", "list"])
def test_a_replayed_step_leaves_training_as_an_unwatched_twin_has_it(kind, tmp_path):
    bare_params, bare_draws, bare_extra, _ = _train(kind)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        params, draws, extra, handle = _train(kind, str(tmp_path))
    assert _bitwise(params, bare_params)
    assert draws == bare_draws
    assert extra == bare_extra
    inst = handle.instrument
    assert inst.mode == "replay" and inst.replays >= len(PLAN)
    assert not [w for w in caught if "cannot be replayed" in str(w.message)]
    run = read_run(str(tmp_path))
    births = [(e["step"], e["layer"]) for e in run.events if "born inside this module" in e["message"]]
    assert births == [(step, "bomb") for step in PLAN], run.events
    assert run.diagnosis["root_cause"]["layer"] == "bomb"
    fc = run.layer_names.index("bomb")
    for step in PLAN:
        i = list(run.steps).index(step)
        assert run.stats[i, fc, M["act_nonfinite"]] == 1
        assert run.stats[i, fc, M["in_nonfinite"]] == 0


def test_a_generator_of_the_models_own_is_not_replayed_and_said_once(tmp_path):
    """Its state before the step was not kept: the re-run could not draw what
    the step drew. Put back, and every module is counted from then on."""
    bare_params, bare_draws, _, _ = _train("generator")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        params, draws, _, handle = _train("generator", str(tmp_path))
    assert _bitwise(params, bare_params)
    assert draws == bare_draws
    said = [str(w.message) for w in caught if "cannot be replayed" in str(w.message)]
    assert len(said) == 1 and "numpy Generator at Drawing.rng" in said[0], said
    inst = handle.instrument
    assert inst.mode == "every_step" and inst.exact
    run = read_run(str(tmp_path))
    fc = run.layer_names.index("bomb")
    i = list(run.steps).index(PLAN[1])  # counted by the every-step flags
    assert run.stats[i, fc, M["act_nonfinite"]] == 1
    assert run.stats[i, fc, M["in_nonfinite"]] == 0


def test_the_capture_reads_numpys_generator_without_get_state(monkeypatch):
    """A step's capture costs a random.getstate() and a 2.5 KB copy of
    numpy's Mersenne Twister words; np.random.get_state() (a dict and an
    array built) only at a replay."""
    assert replay_state._MT_OK
    calls = []
    real = np.random.get_state
    monkeypatch.setattr(np.random, "get_state", lambda *a, **k: calls.append(1) or real(*a, **k))
    np.random.seed(5)
    before = replay_state.HostRng.before()
    assert not calls
    np.random.random(7)
    after = replay_state.HostRng.now()
    before.start_rerun(after)  # the draws again from the first
    assert np.random.random() == np.random.RandomState(5).random_sample(1)[-1]
    after.put_back()  # then on from the eighth
    assert np.random.random() == np.random.RandomState(5).random_sample(8)[-1]


class Stateful(nn.Module):
    """Every kind of state a forward may change, besides parameters and buffers."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.register_buffer("seen", torch.zeros(()))
        self.count = 0
        self.total = torch.zeros(2)
        self.history = [1]
        self.by_name = {"a": 1}
        self.names = {"x"}
        self.recent = __import__("collections").deque([1], maxlen=3)
        self.counts = np.zeros(3)
        self.nested = {"calls": [0], "mask": torch.ones(2)}
        self.alias = self.seen  # a buffer held as an attribute too (the re-run puts buffers back)

    def forward(self, x):
        self.count += 1
        self.total += 1
        self.history.append(2)
        self.by_name["b"] = 2
        self.names.add("y")
        self.recent.append(2)
        self.counts[0] += 1
        self.nested["calls"].append(1)
        self.nested["mask"].mul_(0)
        self.made = 1  # an attribute the forward creates
        return self.fc(x)


def test_the_module_state_a_forward_changes_is_put_back():
    m = Stateful()
    ids = {k: id(v) for k, v in vars(m).items()}
    before = repr({k: v for k, v in vars(m).items() if not k.startswith("_")})
    state = replay_state.ModuleState([m], {id(b) for b in m.buffers()})
    m(torch.ones(1, 2))
    assert state.restore() == []
    assert {k: id(v) for k, v in vars(m).items()} == ids  # the same objects, their contents put back
    assert repr({k: v for k, v in vars(m).items() if not k.startswith("_")}) == before
