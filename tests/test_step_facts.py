"""The training-side facts the diagnosis needs (training/hooks/step_facts.py),
on real loops: gradients left over from the previous step, modules run
without autograd inside the forward, and the param group (and its
hyperparameters) of each row."""

import math

import pytest
import torch
from torch import nn

from tests.test_instrument import Recorder

torch.set_num_threads(1)


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def _train(model, opt, steps, zero="before", micro=1):
    """A loop with the usual placements of zero_grad (or none)."""
    crit = nn.CrossEntropyLoss()
    rec = Recorder(model, opt, crit)
    for s in range(steps):
        x = torch.randn(8, 8, generator=torch.Generator().manual_seed(s))
        y = torch.arange(8) % 3
        if zero == "before":
            opt.zero_grad()
        elif zero == "keep_tensors":
            opt.zero_grad(set_to_none=False)
        elif zero == "data":  # old tutorials: in place through .data (no version bump)
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.data.zero_()
        for k in range(micro):
            out = model(x)
            if zero == "after_forward" and k == 0:
                opt.zero_grad()
            crit(out, y).backward()
        opt.step()
    return rec


@pytest.mark.parametrize("zero", ["before", "keep_tensors", "data", "after_forward"])
def test_cleared_gradients_are_not_carried(zero):
    model = _mlp()
    rec = _train(model, torch.optim.SGD(model.parameters(), lr=0.1), 4, zero=zero)
    for i in range(4):
        v = rec.value("0", "grad_carried", i)
        assert math.isnan(v) or v == 0.0, (zero, i, v)


def test_a_new_gradient_at_a_freed_ones_address_is_not_carried():
    """zero_grad() frees .grad; the next backward's gradient often gets the
    same address and version (seen on a healthy S3 run without a hooked
    criterion, where the check runs at the first gradient's hook): that
    gradient, the one whose accumulation started the check, is left out."""
    from tb_neuraldbg.training.hooks.step_facts import StepFacts

    class Col:
        def __init__(self):
            self.rows, self.c_rows, self.c_keys, self.c_vals = [], [], [], []

        def add_many(self, values, rows, key):
            self.rows += rows

    p = nn.Parameter(torch.randn(3))
    p.grad = torch.zeros(3)
    facts, reused = StepFacts(None), 0
    facts.commit(Col(), [p], [1])
    for _ in range(20):
        old = (id(p.grad), p.grad._version)
        p.grad = None  # zero_grad(set_to_none=True)
        p.grad = torch.zeros(3)  # the next backward's gradient
        reused += (id(p.grad), p.grad._version) == old
        col = Col()
        facts.before_backward(col, [p], [1], fresh=p)
        facts.commit(col, [p], [1])  # (what was carried is recorded at the step)
        assert col.rows == []
    p.grad.add_(1.0)  # a real leftover is still seen: same tensor, same version
    facts.commit(Col(), [p], [1])
    col = Col()
    facts.before_backward(col, [p], [1])
    facts.commit(col, [p], [1])
    assert col.rows == [1]
    assert reused  # the case this test is about happened


def test_gradient_accumulation_on_purpose_is_not_carried():
    model = _mlp()
    rec = _train(model, torch.optim.SGD(model.parameters(), lr=0.1), 4, micro=3)
    assert all(math.isnan(rec.value("2", "grad_carried", i)) for i in range(4))


def _watched(model):
    """(SGD optimizer, cross-entropy criterion, a Recorder on ``model``, a batch x, its labels y)."""
    opt, crit = torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss()
    return opt, crit, Recorder(model, opt, crit), torch.randn(8, 8), torch.arange(8) % 3


def test_a_criterion_shared_with_an_unwatched_model_checks_only_the_watched_steps():
    """One loss module for two models, one watched (a baseline trained beside
    it, as in a benchmark): the other model's backward, between the watched
    model's step and its next zero_grad(), must not read the watched model's
    gradients as leftovers."""
    watched, other = _mlp(), _mlp()
    opt_w, crit, rec, x, y = _watched(watched)
    opt_o = torch.optim.SGD(other.parameters(), lr=0.1)
    losses = []
    for _ in range(4):
        for model, opt in ((watched, opt_w), (other, opt_o)):
            opt.zero_grad()
            loss = crit(model(x), y)
            loss.backward()
            opt.step()
            if model is watched:
                losses.append(loss.item())
    assert len(rec.packets) == 4
    for i in range(4):
        v = rec.value("0", "grad_carried", i)
        assert math.isnan(v) or v == 0.0, (i, v)
        assert rec.value("<loss>", "value", i) == pytest.approx(losses[i])  # the watched model's own loss


def test_a_loop_that_calls_the_watched_modules_directly_keeps_its_loss():
    """The guard above must not drop the loss of a loop that calls the
    watched model's children itself (features = model[0](x) ...), never the
    model's own forward."""
    model = _mlp()
    opt, crit, rec, x, y = _watched(model)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = crit(model[2](model[1](model[0](x))), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert [rec.value("<loss>", "value", i) for i in range(3)] == pytest.approx(losses)


def test_forgotten_zero_grad_carries_the_previous_gradient():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rec = _train(model, opt, 4, zero="never")
    assert math.isnan(rec.value("0", "grad_carried", 0))  # nothing before the first step
    for i in (1, 2, 3):
        assert rec.value("0", "grad_carried", i) > 0
        assert rec.value("2", "grad_carried", i) > 0


@pytest.mark.parametrize("zero_d", [True, False], ids=["dcgan", "no_zero_grad"])
def test_a_backward_through_the_model_that_zero_grad_then_drops_is_not_carried(zero_d):
    """pytorch/examples' DCGAN loop, the discriminator watched: the
    generator's backward runs through D and fills D's .grad after D's step;
    optD.zero_grad() drops them before D's own backward, so no update of D
    sees them. Without that zero_grad they are carried into D's update."""
    torch.manual_seed(0)
    gen, disc = nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 1))
    opt_g, opt_d = torch.optim.Adam(gen.parameters(), 1e-3), torch.optim.Adam(disc.parameters(), 1e-3)
    crit = nn.BCEWithLogitsLoss()
    rec = Recorder(disc, opt_d, crit)
    ones, zeros = torch.ones(16, 1), torch.zeros(16, 1)
    for s in range(4):
        g = torch.Generator().manual_seed(s)
        x, z = torch.randn(16, 2, generator=g) + 1, torch.randn(16, 2, generator=g)
        fake = gen(z)
        if zero_d:
            opt_d.zero_grad()
        (crit(disc(x), ones) + crit(disc(fake.detach()), zeros)).backward()
        opt_d.step()
        opt_g.zero_grad()
        crit(disc(fake), ones).backward()
        opt_g.step()
    for i in (1, 2, 3):
        v = rec.value("0", "grad_carried", i)
        assert (math.isnan(v) or v == 0.0) if zero_d else v > 0, (zero_d, i, v)


class _Frozen(nn.Module):
    """The encoder runs under torch.no_grad() in forward (the bug)."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        with torch.no_grad():
            h = self.enc(x)
        return self.head(torch.relu(h))


def test_a_module_run_without_autograd_inside_forward_is_noted():
    model = _Frozen()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    crit = nn.CrossEntropyLoss()
    rec = Recorder(model, opt, crit)
    for s in range(2):
        opt.zero_grad()
        crit(model(torch.randn(4, 8)), torch.arange(4) % 3).backward()
        with torch.no_grad():  # an evaluation forward before the step: not a bug
            model(torch.randn(4, 8))
        opt.step()
    assert rec.value("enc", "ran_without_grad") == 1.0
    assert rec.value("enc", "grad_missing") == 2  # weight and bias, no gradient
    assert math.isnan(rec.value("head", "ran_without_grad"))


def test_param_groups_per_row():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))
    for p in model[0].parameters():
        p.requires_grad_(False)  # frozen on purpose: no group, not reported
    opt = torch.optim.SGD([{"params": model[2].parameters(), "lr": 0.0, "momentum": 0.9},
                           {"params": model[4].parameters(), "weight_decay": 5e-4}], lr=0.1)
    rec = _train(model, opt, 2)
    assert rec.value("2", "opt_group") == 0 and rec.value("4", "opt_group") == 1
    assert rec.value("2", "lr") == 0.0 and rec.value("4", "lr") == pytest.approx(0.1)
    assert rec.value("2", "momentum") == pytest.approx(0.9) and rec.value("4", "momentum") == 0.0
    assert rec.value("4", "weight_decay") == pytest.approx(5e-4)
    assert math.isnan(rec.value("0", "opt_group"))
    # a change by hand shows at the next step; a layer the optimizer does not hold is -1
    opt.param_groups[1]["weight_decay"] = 0.5
    other = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
    rec.inst.remove()
    rec2 = _train(model, opt, 1)
    assert rec2.value("4", "weight_decay") == pytest.approx(0.5)
    rec2.inst.remove()
    rec3 = _train(model, other, 1)
    assert rec3.value("2", "opt_group") == -1 and math.isnan(rec3.value("2", "lr"))


def test_adam_betas_give_the_momentum():
    model = _mlp()
    rec = _train(model, torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.8, 0.99)), 1)
    assert rec.value("0", "momentum") == pytest.approx(0.8)
