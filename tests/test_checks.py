"""The preflight checks: each passes on a healthy tiny MLP, fails on a planted
fault, and leaves weights, grads, buffers, optimizer and RNG state bitwise as
they were, with no hook left behind."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tb_neuraldbg import checks as C
from tests.faults import InfBackward, InfBackwardOp

torch.set_num_threads(1)

D, N, H, K = 32, 16, 64, 10
CE = nn.CrossEntropyLoss()


def mlp(act=nn.ReLU, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(D, H), act(), nn.Linear(H, K))


def data(seed=1, n=N):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, D, generator=g), torch.randint(0, K, (n,), generator=g)


class Scaled(nn.Module):
    def __init__(self, inner, scale):
        super().__init__()
        self.inner, self.scale = inner, scale

    def forward(self, x):
        return self.inner(x) * self.scale


class Detached(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x).detach()


class SqrtShift(nn.Module):
    """A custom op whose forward makes NaN: sqrt of negative values."""

    def forward(self, x):
        return torch.sqrt(x - 1e3)


class Block(nn.Module):
    """A composite that does work between its children (functional op)."""

    def __init__(self, op):
        super().__init__()
        self.a, self.b, self.op = nn.Linear(H, H), nn.Linear(H, H), op

    def forward(self, x):
        return self.b(self.op(self.a(x)))


def planted(middle):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(D, H), nn.ReLU(), middle, nn.Linear(H, K))


# -- state ------------------------------------------------------------------


def state(model, opt=None):
    s = {
        "params": [p.detach().clone() for p in model.parameters()],
        "ids": [id(p) for p in model.parameters()],
        "grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
        "buffers": [b.clone() for b in model.buffers()],
        "modes": [m.training for m in model.modules()],
        "rng": torch.get_rng_state(),
        "hooks": [
            (len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks))
            for m in model.modules()
        ],
    }
    if opt is not None:
        s["opt"] = copy.deepcopy(opt.state_dict())
        s["opt_ids"] = [id(p) for g in opt.param_groups for p in g["params"]]
    return s


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        if k == "opt":
            assert x["param_groups"] == y["param_groups"]
            for i in x["state"]:
                for n, v in x["state"][i].items():
                    assert torch.equal(v, y["state"][i][n]), (k, i, n)
        elif k == "rng":
            assert torch.equal(x, y)
        elif isinstance(x, list) and x and isinstance(x[0], torch.Tensor):
            assert all(torch.equal(u, v) for u, v in zip(x, y)), k
        elif k == "grads":
            assert all((u is None and v is None) or torch.equal(u, v) for u, v in zip(x, y)), k
        else:
            assert x == y, k


@pytest.fixture
def trained_mlp():
    """A healthy MLP with BatchNorm and Dropout, a user's Adam that has
    stepped (so it holds state) and grads left over from the last backward."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D, H), nn.BatchNorm1d(H), nn.ReLU(), nn.Dropout(0.1), nn.Linear(H, K))
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    x, y = data()
    CE(model(x), y).backward()
    opt.step()
    CE(model(x), y).backward()
    return model, opt, x, y


RUNS = {
    "initial_loss": lambda m, x, y: C.initial_loss(m, x, y, CE),
    "overfit": lambda m, x, y: C.overfit_single_batch(m, x, y, CE, steps=20),
    "lr_range": lambda m, x, y: C.lr_range_test(m, x, y, CE, steps=30),
    "clipping": lambda m, x, y: C.gradient_clipping_advice(m, x, y, CE, steps=5),
    "nonfinite": lambda m, x, y: C.find_nonfinite(m, x, y, CE),
    "units": lambda m, x, y: C.dead_and_saturated_units(m, x),
    "preflight": lambda m, x, y: C.run_preflight(m, x, y, CE, steps=20),
}


@pytest.mark.parametrize("check", list(RUNS), ids=list(RUNS))
def test_state_restored_bitwise(trained_mlp, check):
    model, opt, x, y = trained_mlp
    before = state(model, opt)
    RUNS[check](model, x, y)
    assert_same(state(model, opt), before)
    # The user's next training step is unaffected: same loss as a twin.
    twin = copy.deepcopy(model)
    torch.manual_seed(5)
    a = CE(model(x), y)
    torch.manual_seed(5)
    assert torch.equal(a, CE(twin(x), y))


def test_state_restored_when_the_model_raises():
    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    model = planted(Boom())
    x, y = data()
    before = state(model)
    for run in (RUNS["nonfinite"], RUNS["units"]):
        with pytest.raises(RuntimeError, match="boom"):
            run(model, x, y)
        assert_same(state(model), before)


# -- 1. initial loss --------------------------------------------------------


def test_initial_loss_healthy_matches_reference():
    model, (x, y) = mlp(), data()
    r = C.initial_loss(model, x, y, CE)
    assert r.ok, r.message
    assert r.loss == pytest.approx(F.cross_entropy(model(x), y).item(), rel=1e-6)
    assert r.expected == pytest.approx(math.log(K)) and r.num_classes == K


def test_initial_loss_fails_on_large_logits():
    inner, (x, y) = mlp(), data()
    r = C.initial_loss(Scaled(inner, 50.0), x, y, CE)
    assert not r.ok and "too large" in r.message
    assert r.loss == pytest.approx(F.cross_entropy(inner(x) * 50, y).item(), rel=1e-5)
    assert abs(r.loss - r.expected) > r.tolerance


def test_initial_loss_binary_and_skips_non_ce():
    model, (x, _) = mlp(), data()
    yb = (torch.rand(N, K) > 0.5).float()
    r = C.initial_loss(model, x, yb, nn.BCEWithLogitsLoss())
    assert r.ok and r.expected == pytest.approx(math.log(2))
    assert C.initial_loss(model, x, yb, nn.MSELoss()).ok


# -- 2. overfit one batch ---------------------------------------------------


def test_overfit_healthy():
    model, (x, y) = mlp(), data()
    ref = F.cross_entropy(model(x), y).item()
    r = C.overfit_single_batch(model, x, y, CE)
    assert r.ok, r.message
    assert r.initial_loss == pytest.approx(ref, rel=1e-6)
    assert r.final_loss <= max(0.1 * ref, 0.05)
    assert len(r.losses) == r.steps < 200  # stopped once the goal was met
    assert r.no_grad_params == ()


def test_overfit_fails_with_detached_output():
    model, (x, y) = Detached(mlp()), data()
    r = C.overfit_single_batch(model, x, y, CE)
    assert not r.ok and "detached" in r.message
    assert len(r.no_grad_params) == len(list(model.parameters()))


def test_overfit_fails_with_zero_lr():
    model, (x, y) = mlp(), data()
    ref = F.cross_entropy(model(x), y).item()
    zero_lr = lambda p: torch.optim.SGD(p, lr=0.0)  # noqa: E731
    r = C.overfit_single_batch(model, x, y, CE, optimizer_factory=zero_lr, steps=30)
    assert not r.ok
    assert r.final_loss == pytest.approx(ref, rel=1e-6)  # nothing moved


def test_overfit_fails_on_labels_the_inputs_cannot_explain():
    # Every input identical, labels different: the best any model can do is
    # the entropy of the label distribution.
    model, (x, y) = mlp(), data()
    x = x[:1].expand(N, D).clone()
    p = torch.bincount(y, minlength=K).float() / N
    entropy = -(p[p > 0] * p[p > 0].log()).sum().item()
    fast = lambda p: torch.optim.Adam(p, 1e-2)  # noqa: E731
    r = C.overfit_single_batch(model, x, y, CE, optimizer_factory=fast, steps=100)
    assert not r.ok
    assert r.final_loss >= entropy - 1e-3


# -- 3. LR range test -------------------------------------------------------


def test_lr_range_healthy_against_reference():
    model, (x, y) = mlp(), data()
    r = C.lr_range_test(model, x, y, CE, steps=60)
    assert r.ok, r.message
    n = len(r.lrs)
    ref_lrs = torch.logspace(-7, 1, 60, dtype=torch.float64)[:n]
    assert torch.allclose(torch.tensor(r.lrs, dtype=torch.float64), ref_lrs, rtol=1e-9)
    # Debiased EMA, recomputed.
    avg, sm = 0.0, []
    for i, v in enumerate(r.losses):
        avg = 0.98 * avg + 0.02 * v
        sm.append(avg / (1 - 0.98 ** (i + 1)))
    assert r.smoothed == pytest.approx(sm)
    # Steepest descent of the smoothed curve against log lr (central
    # differences, as numpy.gradient on a uniform grid), over the used part.
    last = n - 1 if sm[-1] > 4 * min(sm[:-1]) else n
    g = torch.gradient(torch.tensor(sm[:last], dtype=torch.float64))[0]
    lo, hi = max(1, last // 10), last - 5
    assert r.suggested_lr == pytest.approx(r.lrs[lo + int(g[lo:hi].argmin())])
    i_min = min(range(last), key=sm.__getitem__)
    assert r.lr_min_div10 == pytest.approx(r.lrs[i_min] / 10)
    # The suggestion trains better than the start of the sweep.
    after = {}
    for lr in (r.suggested_lr, r.lrs[0]):
        m = mlp()
        opt = torch.optim.SGD(m.parameters(), lr=lr)
        for _ in range(10):
            opt.zero_grad()
            CE(m(x), y).backward()
            opt.step()
        after[lr] = CE(m(x), y).item()
    assert after[r.suggested_lr] < after[r.lrs[0]]


def test_lr_range_stops_on_divergence_and_takes_an_iterable():
    model, (x, y) = mlp(), data()
    r = C.lr_range_test(model, [(x, y), data(seed=2)], None, CE, start_lr=1e-3, end_lr=1e4, steps=60)
    assert len(r.lrs) < 60  # stopped early
    assert r.smoothed[-1] > 4 * min(r.smoothed[:-1]) or not math.isfinite(r.smoothed[-1])


def test_lr_range_fails_when_nothing_trains():
    r = C.lr_range_test(Detached(mlp()), *data(), CE, steps=20)
    assert not r.ok and r.suggested_lr is None


# -- 4. gradient clipping ---------------------------------------------------


def reference_norms(model, x, y, factory, steps):
    m = copy.deepcopy(model)
    opt = factory(list(m.parameters()))
    out = []
    for _ in range(steps):
        opt.zero_grad()
        CE(m(x), y).backward()
        out.append(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in m.parameters()])).item())
        opt.step()
    return out


def test_clipping_healthy_against_reference():
    model, (x, y) = mlp(), data()
    factory = lambda p: torch.optim.Adam(p, 1e-3)  # noqa: E731
    r = C.gradient_clipping_advice(model, x, y, CE, steps=10, optimizer_factory=factory)
    assert r.ok, r.message
    ref = reference_norms(model, x, y, factory, 10)
    assert r.norms == pytest.approx(ref, rel=1e-5)
    p90 = torch.quantile(torch.tensor(ref, dtype=torch.float64), 0.9).item()
    assert r.suggested_clip == pytest.approx(p90, rel=1e-5)
    assert r.spikes == ()


def test_clipping_flags_spikes_from_a_huge_lr():
    model, (x, y) = mlp(), data()
    factory = lambda p: torch.optim.SGD(p, lr=10.0)  # noqa: E731
    r = C.gradient_clipping_advice(model, x, y, CE, steps=12, optimizer_factory=factory)
    assert not r.ok
    ref = reference_norms(model, x, y, factory, 12)
    med = torch.tensor(ref).median().item()
    assert r.spikes == tuple(i for i, v in enumerate(ref) if v > 5 * med)
    assert r.spikes


# -- 5. non-finite values ---------------------------------------------------


def test_nonfinite_healthy():
    r = C.find_nonfinite(mlp(), *data(), CE)
    assert r.ok and r.module is None, r.message


@pytest.mark.parametrize(
    "middle, where, phase",
    [
        (lambda: SqrtShift(), "2", "forward"),
        (lambda: Block(lambda t: torch.log(t - 100)), "2", "forward"),  # functional op in a composite
        (lambda: nn.Sequential(nn.Linear(H, H), SqrtShift()), "2.1", "forward"),
        (lambda: InfBackward(), "2", "backward"),
        (lambda: Block(InfBackwardOp.apply), "2", "backward"),  # functional op in a composite
        (lambda: nn.Sequential(nn.Linear(H, H), InfBackward(), nn.Tanh()), "2.1", "backward"),
    ],
    ids=["forward-leaf", "forward-composite", "forward-nested", "backward-leaf", "backward-composite",
         "backward-nested"],
)
def test_nonfinite_finds_the_planted_op(middle, where, phase):
    model, (x, y) = planted(middle()), data()
    # Reference: the planted fault is real (plain autograd sees it).
    out = model(x)
    loss = CE(out, y)
    loss.backward()
    assert not (torch.isfinite(out).all() and all(torch.isfinite(p.grad).all() for p in model.parameters()))
    model.zero_grad(set_to_none=True)
    before = state(model)
    r = C.find_nonfinite(model, x, y, CE)
    assert (r.ok, r.module, r.phase) == (False, where, phase), r.message
    assert_same(state(model), before)


def test_nonfinite_blames_the_input_and_the_loss():
    model, (x, y) = mlp(), data()
    bad = x.clone()
    bad[3, 5] = float("inf")
    assert C.find_nonfinite(model, bad, y, CE).module == "<input>"
    r = C.find_nonfinite(model, x, y, lambda out, t: torch.log(-out.abs().sum()))  # log of a negative
    assert (r.module, r.phase) == ("<loss>", "forward")


def test_nonfinite_without_criterion():
    assert C.find_nonfinite(planted(InfBackward()), data()[0]).phase == "backward"
    assert C.find_nonfinite(mlp(), data()[0]).ok


# -- 6. dead and saturated units --------------------------------------------


def test_units_healthy():
    for act in (nn.ReLU, nn.Tanh):
        r = C.dead_and_saturated_units(mlp(act), data(n=64)[0])
        assert r.ok, r.message
        assert [l.name for l in r.layers] == ["1"]


def test_dead_relu_from_negative_bias_matches_reference():
    model, x = mlp(), data(n=64)[0]
    with torch.no_grad():
        model[0].bias.fill_(-100.0)
    r = C.dead_and_saturated_units(model, x)
    assert not r.ok and "dead" in r.message
    ref = (model[1](model[0](x)) == 0).all(0).float().mean().item()
    (layer,) = r.layers
    assert layer.flagged and layer.dead_fraction == pytest.approx(ref) and ref > 0.9


def test_saturated_tanh_from_huge_weights_matches_reference():
    model, x = mlp(nn.Tanh), data(n=64)[0]
    with torch.no_grad():
        model[0].weight.mul_(100.0)
    r = C.dead_and_saturated_units(model, x)
    assert not r.ok and "saturated" in r.message
    ref = (model[1](model[0](x)).abs() >= 0.99).float().mean().item()
    (layer,) = r.layers
    assert layer.flagged and layer.saturated_fraction == pytest.approx(ref) and ref > 0.6


# -- 7. the protocol --------------------------------------------------------


def test_preflight_healthy_and_format():
    model, (x, y) = mlp(), data()
    results = C.run_preflight(model, x, y, CE)
    assert [r.name for r in results] == [
        "find_nonfinite", "initial_loss", "dead_and_saturated_units", "overfit_single_batch"]
    assert all(r.ok for r in results), C.format_results(results)
    text = C.format_results(results)
    assert max(map(len, text.splitlines())) <= 80
    assert text.splitlines()[-1] == "4/4 checks passed"


def test_preflight_reports_large_logits():
    inner, (x, y) = mlp(), data()
    results = C.run_preflight(Scaled(inner, 50.0), x, y, CE, steps=20)
    bad = {r.name for r in results if not r.ok}
    assert "initial_loss" in bad
    text = C.format_results(results)
    assert "[FAIL] initial_loss" in text and max(map(len, text.splitlines())) <= 80


def test_public_face():
    import tb_neuraldbg

    assert "checks" in tb_neuraldbg.__all__ and tb_neuraldbg.checks is C
