"""Hooks on real models: recorded values against reference computations
(``p.grad`` before clipping, hand-computed activation statistics), module
selection, removal, and training left bit-for-bit unchanged."""

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tb_neuraldbg import metadata
from tb_neuraldbg.training.step import stats as S
from tb_neuraldbg.training.hooks.instrument import Instrument
from tb_neuraldbg.training.modules import select_modules
from tb_neuraldbg.training.step.rows import RowAssembler
from tb_neuraldbg.training.schedule import WatchConfig
from tests.device import DEVICE, to_device
from tests.faults import InfBackward

M = metadata.METRIC_INDEX
torch.set_num_threads(1)


# -- helpers ----------------------------------------------------------------


class Recorder:
    """An Instrument with a list sink; rows assembled like the worker does."""

    def __init__(self, model, optimizer=None, criterion=None, scaler=None, **cfg):
        self.packets = []
        self.inst = Instrument(
            model, self.packets.append, WatchConfig(**cfg), optimizer=optimizer, criterion=criterion, scaler=scaler
        )
        self._assembler = RowAssembler()
        self._rows = []

    @property
    def names(self):
        return [l["name"] for l in self.inst.layers]

    def row(self, i=-1):
        # In step order through one RowAssembler, as the worker does.
        while len(self._rows) < len(self.packets):
            p = self.packets[len(self._rows)]
            self._rows.append(self._assembler.row(p, p.host_values(), len(p.layers)))
        r = self._rows[i]
        n = len(self.inst.layers)
        return np.pad(r, ((0, n - len(r)), (0, 0)), constant_values=np.nan) if len(r) < n else r

    def value(self, layer, metric, i=-1):
        return float(self.row(i)[self.names.index(layer), M[metric]])


def layer_grad_norm(module, recurse=True):
    gs = [p.grad for p in module.parameters(recurse=recurse) if p.grad is not None]
    return math.sqrt(sum(float(g.double().pow(2).sum()) for g in gs))


def capture_outputs(*modules):
    """Plain forward hooks recording each module's output (the reference)."""
    outs = {}
    handles = []
    for m in modules:
        def hook(mod, args, out, m=m):
            outs.setdefault(m, out[0] if isinstance(out, tuple) else out)
        handles.append(m.register_forward_hook(hook))
    return outs, handles


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


class FunctionalMLP(nn.Module):
    """Activations applied functionally: only the next layer's input shows them."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 24)
        self.fc2 = nn.Linear(24, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU()
        self.head = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        x = F.max_pool2d(self.act(self.bn(self.conv(x))), 2)
        return self.head(x.flatten(1))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.encoder(x).mean(1))


class LSTMNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.lstm = nn.LSTM(8, 16, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, tokens):
        out, _ = self.lstm(self.emb(tokens))
        return self.head(out[:, -1])


def train(model, make_batch, steps=3, lr=0.05, clip=None, recorder_kwargs=None, accumulate=1, hook=None):
    """An ordinary loop; returns the Recorder (or None) and per-step reference
    gradient norms taken right before clipping / the optimizer step."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    crit = nn.CrossEntropyLoss()
    rec = Recorder(model, opt, crit, **(recorder_kwargs or {})) if recorder_kwargs is not None else None
    refs = []
    for step in range(steps):
        opt.zero_grad()
        for _ in range(accumulate):
            x, y = make_batch()
            loss = crit(model(x), y) / accumulate
            loss.backward()
        if hook:
            refs.append(hook())
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
    return rec, refs


def batches(shape, classes, gen_seed=1, integer=None):
    g = torch.Generator().manual_seed(gen_seed)

    def make():
        if integer:
            x = torch.randint(0, integer, shape, generator=g, device="cpu")
        else:
            x = torch.randn(shape, generator=g, device="cpu")
        return to_device(x), to_device(torch.randint(0, classes, (shape[0],), generator=g, device="cpu"))

    return make


# -- selection and names ------------------------------------------------------


def test_rows_follow_forward_order_with_pseudo_layers():
    model = mlp()
    rec, _ = train(model, batches((16, 12), 4), steps=2, recorder_kwargs={})
    assert rec.names == ["<input>", "0", "1", "2", "3", "4", "<loss>", "<optimizer>"]
    assert [l["type"] for l in rec.inst.layers][1:6] == ["Linear", "ReLU", "Linear", "Tanh", "Linear"]
    assert len(rec.packets) == 2 and [p.step for p in rec.packets] == [0, 1]


def test_transformer_rows_keep_attention_whole_and_skip_containers():
    model = Encoder()
    names = [n for n, _ in select_modules(model)]
    assert "encoder.layers.0.self_attn" in names
    assert "encoder.layers.0.self_attn.out_proj" not in names  # never called as a module
    assert "encoder.layers.0" not in names and "encoder" not in names  # containers
    assert not any("dropout" in n for n in names)  # skipped by the type table
    rec, _ = train(model, batches((4, 6, 16), 3), steps=1, recorder_kwargs={})
    order = rec.names
    assert order.index("encoder.layers.0.self_attn") < order.index("encoder.layers.0.linear1")
    assert order.index("encoder.layers.0.linear2") < order.index("encoder.layers.1.self_attn")


def test_names_through_dataparallel_and_compile_wrappers():
    base = mlp()
    plain = [n for n, _ in select_modules(base)]
    assert [n for n, _ in select_modules(nn.DataParallel(base))] == plain

    class OptimizedModule(nn.Module):  # what torch.compile returns, by name
        def __init__(self, m):
            super().__init__()
            self._orig_mod = m

    assert [n for n, _ in select_modules(OptimizedModule(nn.DataParallel(base)))] == plain


def test_include_exclude_by_pattern_and_type_and_the_cap():
    model = Encoder()
    only = [n for n, _ in select_modules(model, include="encoder.layers.1.*")]
    assert only and all(n.startswith("encoder.layers.1.") for n in only)
    no_norm = [n for n, m in select_modules(model, exclude=nn.LayerNorm)]
    assert not any("norm" in n for n in no_norm)
    with_dropout = [n for n, _ in select_modules(model, include=[nn.Dropout])]
    assert with_dropout and all("dropout" in n for n in with_dropout)
    with pytest.warns(UserWarning, match="max_layers=3"):
        capped = [n for n, _ in select_modules(model, max_layers=3)]
    full = [n for n, _ in select_modules(model)]
    assert len(capped) == 3 and capped[0] == full[0] and capped[-1] == full[-1]


# -- values against references ----------------------------------------------


def test_grad_norm_is_the_norm_before_clipping():
    model = mlp()
    ref_norms = []
    rec, _ = train(model, batches((16, 12), 4), steps=3, clip=1e-3, recorder_kwargs={},
                   hook=lambda: ref_norms.append([layer_grad_norm(model[i]) for i in (0, 2, 4)]))
    for step in range(3):
        for name, ref in zip(("0", "2", "4"), ref_norms[step]):
            assert ref > 1e-2  # so clipping to 1e-3 did change the gradients
            assert rec.value(name, "grad_norm", step) == pytest.approx(ref, rel=1e-5)
            assert rec.value(name, "grad_nonfinite", step) == 0
            assert rec.value(name, "grad_missing", step) == 0
    assert np.isnan(rec.value("1", "grad_norm"))  # ReLU has no parameters


def test_norm_bursts_run_with_the_garbage_collector_held_off_and_leave_it_as_found(monkeypatch):
    # The gradient and weight norms make one 0-d tensor per parameter: they
    # run with the collector disabled (see training/gcpause.py), which is
    # enabled again after, and left alone when the user disabled it.
    import gc

    seen = []
    real = S.stacked_norms
    monkeypatch.setattr(S, "stacked_norms", lambda ts: seen.append(gc.isenabled()) or real(ts))
    assert gc.isenabled()
    rec, _ = train(mlp(), batches((16, 12), 4), steps=2, recorder_kwargs={})
    assert len(seen) >= 4 and not any(seen)  # gradient and weight norms of both steps
    assert gc.isenabled()
    gc.disable()
    try:
        seen.clear()
        train(mlp(), batches((16, 12), 4), steps=1, recorder_kwargs={})
        assert seen and not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_comes_back_when_a_paused_method_raises():
    import gc

    from tb_neuraldbg.training.hooks.gcpause import gc_paused

    @gc_paused
    def fails():
        assert not gc.isenabled()
        raise KeyError("x")

    with pytest.raises(KeyError):
        fails()
    assert gc.isenabled()


def test_gradient_accumulation_records_the_accumulated_gradient():
    model = mlp()
    ref = []
    rec, _ = train(model, batches((8, 12), 4), steps=2, accumulate=3, recorder_kwargs={},
                   hook=lambda: ref.append(layer_grad_norm(model[2])))
    assert len(rec.packets) == 2  # one record per optimizer step
    for step in range(2):
        assert rec.value("2", "grad_norm", step) == pytest.approx(ref[step], rel=1e-5)


def test_activation_statistics_equal_hand_computations_with_functional_relu():
    model = FunctionalMLP()
    outs, handles = capture_outputs(model.fc1, model.fc2)
    rec, _ = train(model, batches((32, 10), 3), steps=1, recorder_kwargs={})
    h = outs[model.fc1].detach()
    assert rec.value("fc1", "act_mean") == pytest.approx(h.mean().item(), rel=1e-5, abs=1e-7)
    assert rec.value("fc1", "act_std") == pytest.approx(h.std().item(), rel=1e-4)
    assert rec.value("fc1", "act_absmax") == pytest.approx(h.abs().max().item(), rel=1e-6)
    assert rec.value("fc1", "act_zero_frac") == 0
    r = torch.relu(h)  # the functional activation, seen as fc2's input
    assert rec.value("fc2", "in_zero_frac") == pytest.approx((r == 0).float().mean().item())
    dead = ((r != 0).sum(0) == 0).float().mean().item()
    assert rec.value("fc2", "in_dead_frac") == pytest.approx(dead)
    assert rec.value("fc2", "in_nonfinite") == 0
    x_in = rec.row()[0]
    assert not np.isnan(x_in[M["act_mean"]]) and x_in[M["act_nonfinite"]] == 0
    for hd in handles:
        hd.remove()


def test_relu_module_dead_fraction_and_tanh_saturation():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(6, 20), nn.ReLU(), nn.Linear(20, 20), nn.Tanh(), nn.Linear(20, 2))
    with torch.no_grad():
        model[0].bias[:5] = -100.0  # five units dead for any input
        model[2].weight.mul_(30.0)  # push tanh into saturation
    outs, handles = capture_outputs(model[1], model[3])
    rec, _ = train(model, batches((16, 6), 2), steps=1, lr=0.0, recorder_kwargs={})
    relu_out, tanh_out = outs[model[1]].detach(), outs[model[3]].detach()
    dead = ((relu_out != 0).sum(0) == 0).float().mean().item()
    assert dead >= 5 / 20
    assert rec.value("1", "act_dead_frac") == pytest.approx(dead)
    sat = (tanh_out.abs() >= 0.99).float().mean().item()
    assert sat > 0.3
    assert rec.value("3", "act_sat_frac") == pytest.approx(sat)
    assert np.isnan(rec.value("1", "act_sat_frac"))  # not bounded
    assert rec.value("2", "in_dead_frac") == pytest.approx(dead)  # same tensor, reused
    for hd in handles:
        hd.remove()


def test_cnn_with_batchnorm():
    model = CNN()
    outs, handles = capture_outputs(model.bn)
    ref = []
    rec, _ = train(model, batches((8, 3, 8, 8), 5), steps=2, recorder_kwargs={},
                   hook=lambda: ref.append((layer_grad_norm(model.conv), layer_grad_norm(model.bn))))
    assert rec.names[1:5] == ["conv", "bn", "act", "head"]
    bn = outs[model.bn].detach()
    assert rec.value("bn", "act_mean", 0) == pytest.approx(bn.mean().item(), abs=1e-5)
    assert rec.value("bn", "act_std", 0) == pytest.approx(bn.std().item(), rel=1e-4)
    assert rec.value("conv", "grad_norm", 1) == pytest.approx(ref[1][0], rel=1e-5)
    assert rec.value("bn", "grad_norm", 1) == pytest.approx(ref[1][1], rel=1e-5)
    for hd in handles:
        hd.remove()


def test_transformer_attention_owns_out_proj_gradients():
    model = Encoder()
    attn = model.encoder.layers[0].self_attn
    ref = []
    rec, _ = train(model, batches((4, 6, 16), 3), steps=2, recorder_kwargs={},
                   hook=lambda: ref.append(layer_grad_norm(attn)))
    assert rec.value("encoder.layers.0.self_attn", "grad_norm", 1) == pytest.approx(ref[1], rel=1e-5)
    # The default activation of the layer is functional: linear2 sees it.
    assert rec.value("encoder.layers.0.linear2", "in_zero_frac", 0) > 0.2


def test_lstm_and_embedding():
    model = LSTMNet()
    ref = []
    rec, _ = train(model, batches((4, 7), 3, integer=20), steps=2, recorder_kwargs={},
                   hook=lambda: ref.append(layer_grad_norm(model.lstm)))
    assert rec.names[1:4] == ["emb", "lstm", "head"]
    assert rec.inst.layers[2]["type"] == "LSTM"
    assert rec.value("lstm", "grad_norm", 1) == pytest.approx(ref[1], rel=1e-5)
    assert not np.isnan(rec.value("lstm", "act_mean", 1))


def test_loss_learning_rate_update_ratio_and_weight_norm():
    model = mlp()
    before = model[0].weight.detach().clone(), model[0].bias.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    crit = nn.CrossEntropyLoss()
    rec = Recorder(model, opt, crit)
    x, y = batches((16, 12), 4)()
    loss = crit(model(x), y)
    loss.backward()
    opt.step()
    assert rec.value("<loss>", "value") == pytest.approx(loss.item())
    assert rec.value("<optimizer>", "value") == pytest.approx(0.05)
    assert np.isnan(rec.value("<optimizer>", "scale"))
    w, b = model[0].weight.detach(), model[0].bias.detach()
    dw = math.sqrt(float((w - before[0]).pow(2).sum() + (b - before[1]).pow(2).sum()))
    w0 = math.sqrt(float(before[0].pow(2).sum() + before[1].pow(2).sum()))
    assert rec.value("0", "update_ratio") == pytest.approx(dw / w0, rel=1e-4)
    assert rec.value("0", "weight_norm") == pytest.approx(math.sqrt(float(w.pow(2).sum() + b.pow(2).sum())), rel=1e-5)


@pytest.mark.parametrize("mode", ["replay", "every_step"])
def test_nonfinite_activation_is_counted_at_its_step(mode):
    model = FunctionalMLP()
    with torch.no_grad():
        model.fc1.weight[0, 0] = math.inf
    rec, _ = train(model, batches((8, 10), 3), steps=12, lr=0.0, recorder_kwargs=dict(nonfinite=mode))
    # At step 0 fc1's first output column is +-inf for every sample (8
    # values); its update (lr 0 times a NaN gradient) makes every weight NaN.
    x, _ = batches((8, 10), 3)()
    everything = int((~torch.isfinite(model.fc1(x))).sum())
    assert everything == 8 * 24
    if mode == "replay":
        # Every step re-run before its update: exact from step 0 (a full
        # step), and at step 11 (a cheap one).
        assert rec.inst.replays == 12
        assert [rec.value("fc1", "act_nonfinite", s) for s in (0, 11)] == [8, everything]
    else:
        # The flag ("at least one") at step 0, exact counts from step 1 on.
        assert rec.value("fc1", "act_nonfinite", 0) == 1
        assert rec.value("fc1", "act_nonfinite", 11) == everything
    assert rec.value("<input>", "act_nonfinite", 11) == 0
    assert rec.value("fc1", "in_nonfinite", 11) == 0 and rec.value("fc2", "in_nonfinite", 11) > 0


def test_scaler_records_unscaled_norms_scale_and_skipped_steps():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    crit = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler(DEVICE.type, init_scale=1024.0)
    rec = Recorder(model, opt, crit, scaler=scaler)
    ref = []
    make = batches((16, 12), 4)
    for step in range(3):
        opt.zero_grad()
        x, y = make()
        if step == 1:
            x[0, 0] = math.inf  # the scaler skips this optimizer step
        scaler.scale(crit(model(x), y)).backward()
        scaler.unscale_(opt)
        ref.append(layer_grad_norm(model[2]))
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
        scaler.step(opt)
        scaler.update()
    assert [p.step for p in rec.packets] == [0, 1, 2]  # the skipped step too
    assert rec.value("2", "grad_norm", 0) == pytest.approx(ref[0], rel=1e-5)
    assert rec.value("<optimizer>", "scale", 0) == 1024.0
    assert rec.value("<optimizer>", "scale", 2) == 512.0  # backed off after the skip
    assert rec.value("<input>", "act_nonfinite", 1) >= 1
    assert rec.value("2", "grad_nonfinite", 1) >= 1
    rec.inst.remove()
    assert "update" not in scaler.__dict__  # the wrapper is gone


def test_scaler_far_grown_records_finite_norms_without_a_replay():
    # A GradScaler that never sees an overflow (bfloat16 autocast, float32)
    # doubles its scale for good: at 2**80 the scaled gradients of this MLP
    # are finite but their float32 sums of squares are not (from a norm of
    # 1.8e19). Their norms must be the unscaled ones, the step clean.
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    crit = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler(DEVICE.type, init_scale=2.0**80)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        rec = Recorder(model, opt, crit, scaler=scaler)
        ref = []
        make = batches((16, 12), 4)
        for _ in range(3):
            opt.zero_grad()
            x, y = make()
            scaler.scale(crit(model(x), y)).backward()
            assert all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())
            ref.append(layer_grad_norm(model[0]) / 2.0**80)
            scaler.step(opt)
            scaler.update()
    assert rec.inst.replays == 0 and rec.inst.mode == "replay"
    for step in range(3):
        assert rec.value("0", "grad_norm", step) == pytest.approx(ref[step], rel=1e-5)
        assert rec.value("<optimizer>", "scale", step) == 2.0**80


def test_record_without_optimizer():
    model = mlp()
    rec = Recorder(model)
    crit = nn.CrossEntropyLoss()
    make = batches((16, 12), 4)
    for step in range(3):
        model.zero_grad()
        x, y = make()
        loss = crit(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
        rec.inst.record(loss=loss)
    assert [p.step for p in rec.packets] == [0, 1, 2]
    assert rec.value("<loss>", "value", 2) == pytest.approx(loss.item())
    assert rec.value("0", "grad_norm", 2) == pytest.approx(layer_grad_norm(model[0]), rel=1e-5)
    assert rec.value("0", "update_ratio", 1) > 0  # compared with the previous record


def test_eval_forward_without_grad_is_not_recorded():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder(model, opt, nn.CrossEntropyLoss())
    x, y = batches((16, 12), 4)()
    with torch.no_grad():
        model(x * 1000)
    F.cross_entropy(model(x), y).backward()
    opt.step()
    assert rec.value("<input>", "act_absmax") == pytest.approx(x.abs().max().item())


# -- never harm training -------------------------------------------------------


def _snapshot(model):
    return [p.detach().clone() for p in model.parameters()], [p.grad.clone() for p in model.parameters()]


def wide_mlp():
    # activations of 256 x 128 = 32768 elements: the hooks switch to one thread
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4))


@pytest.mark.parametrize("make_model,shape,integer", [
    (mlp, (16, 12), None), (wide_mlp, (256, 64), None), (CNN, (4, 3, 8, 8), None),
    (Encoder, (2, 5, 16), None), (LSTMNet, (4, 6), 20),
], ids=["mlp", "wide_mlp", "cnn", "transformer", "lstm"])
def test_training_is_bitwise_identical_with_and_without_hooks(make_model, shape, integer):
    classes = 4 if make_model in (mlp, wide_mlp) else (5 if make_model is CNN else 3)
    results = []
    # Two threads: the hooks switch to one thread for their own reductions,
    # and the user's ops must not notice.
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    for watched in (False, True):
        torch.manual_seed(0)
        model = make_model()
        outs = []
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        crit = nn.CrossEntropyLoss()
        rec = Recorder(model, opt, crit, stats_every=2, hist_every=2) if watched else None
        make = batches(shape, classes, integer=integer)
        for _ in range(4):
            opt.zero_grad()
            x, y = make()
            out = model(x)
            outs.append(out.detach().clone())
            crit(out, y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            grads = [p.grad.clone() for p in model.parameters()]
            opt.step()
        results.append((outs, grads, [p.detach().clone() for p in model.parameters()]))
        if rec:
            assert len(rec.packets) == 4
            assert torch.get_num_threads() == 2
    torch.set_num_threads(threads)
    (o1, g1, p1), (o2, g2, p2) = results
    assert all(torch.equal(a, b) for a, b in zip(o1, o2))
    assert all(torch.equal(a, b) for a, b in zip(g1, g2))
    assert all(torch.equal(a, b) for a, b in zip(p1, p2))


class Poisoned(nn.Module):
    """Dropout, BatchNorm, a call counter that changes the output, and a
    switch planting a non-finite value in forward or in backward."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(16, 16)
        self.head = nn.Linear(16, 3)
        self.calls = 0
        self.poison = None

    def forward(self, x):
        self.calls += 1
        h = self.fc2(self.drop(torch.relu(self.bn(self.fc1(x)))))
        if self.poison == "forward":
            h = h.clone()
            h[0, 0] = math.inf
        elif self.poison == "backward":
            h = InfBackward()(h)
        return self.head(h) * (1 + 1e-3 * self.calls)


def _bits(t):
    """The tensor's bytes: NaN equals NaN when its bits do."""
    return t.detach().reshape(-1).view(torch.uint8).clone()


@pytest.mark.parametrize("loss_kind", ["criterion", "criterion_on_a_view", "by_hand", "amp_scaler"])
def test_training_is_bitwise_identical_at_replayed_steps(loss_kind):
    """Steps with a non-finite value are re-run before the update: weights,
    gradients, BatchNorm buffers, optimizer state, the RNG and the model's
    own counter are as without the writer, at every step."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    plan = {3: "forward", 4: "backward", 6: "forward", 7: "backward"}  # stats_every=3: 3 and 6 full
    results = []
    for watched in (False, True):
        torch.manual_seed(0)
        model = Poisoned()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        crit = nn.CrossEntropyLoss()
        scaler = torch.amp.GradScaler(DEVICE.type, init_scale=256.0) if loss_kind == "amp_scaler" else None
        rec = Recorder(model, opt, crit, scaler=scaler, stats_every=3) if watched else None
        make = batches((16, 8), 3)
        trace = []
        fc2_out, handles = capture_outputs(model.fc2)
        fc2_means = []
        for step in range(9):
            model.poison = plan.get(step)
            x, y = make()
            opt.zero_grad()
            fc2_out.clear()
            if scaler is not None:
                with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
                    out = model(x)
                scaler.scale(crit(out.float(), y)).backward()
                scaler.step(opt)
                scaler.update()
            else:
                out = model(x)
                if loss_kind == "criterion":
                    loss = crit(out, y)
                elif loss_kind == "criterion_on_a_view":
                    loss = crit(out.view(16, 3), y)
                else:
                    loss = (out.float() - 1).pow(2).mean()
                loss.backward()
                for p in model.parameters():  # the user's guard: no NaN in the weights
                    p.grad.nan_to_num_(0.0, 0.0, 0.0)
                with torch.no_grad():  # the user's own draw between backward and step
                    model.head.bias.add_(1e-4 * torch.rand(3))  # on DEVICE: its generator
                opt.step()
            fc2_means.append(float(fc2_out[model.fc2].detach().double().mean()))
            state = [_bits(out)] + [_bits(p) for p in model.parameters()]
            state += [_bits(p.grad) for p in model.parameters()] + [_bits(b) for b in model.buffers()]
            state += [_bits(opt.state[p]["momentum_buffer"]) for p in model.parameters() if p in opt.state]
            rng = [torch.get_rng_state()] + ([torch.cuda.get_rng_state()] if DEVICE.type == "cuda" else [])
            trace.append((state, torch.cat(rng), model.calls))
        results.append(trace)
        if rec:
            assert rec.inst.mode == "replay" and rec.inst.replays == len(plan)
            names = rec.names
            # each replay found the planted value where it was born
            for step, where in plan.items():
                row = rec.row(step)
                if where == "forward":
                    assert row[names.index("fc2"), M["act_nonfinite"]] == 0
                    assert row[names.index("head"), M["in_nonfinite"]] >= 1
                else:
                    assert row[names.index("head"), M["gout_nonfinite"]] == 0
                    assert row[names.index("fc2"), M["gout_nonfinite"]] == 16 * 16
            # step 4 is cheap: fc2 was measured in the replay only, with the
            # forward's dropout mask (its RNG state restored)
            assert rec.value("fc2", "act_mean", 4) == pytest.approx(fc2_means[4], rel=1e-5)
        for h in handles:
            h.remove()
    torch.set_num_threads(threads)
    bare, watched = results
    for step, ((s1, r1, c1), (s2, r2, c2)) in enumerate(zip(bare, watched)):
        assert c1 == c2 and torch.equal(r1, r2), step
        assert len(s1) == len(s2) and all(torch.equal(a, b) for a, b in zip(s1, s2)), step


def _hook_counts(model, opt):
    n = 0
    for m in model.modules():
        n += len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
    for p in model.parameters():
        n += len(getattr(p, "_post_accumulate_grad_hooks", None) or {})
    n += len(opt._optimizer_step_pre_hooks) + len(opt._optimizer_step_post_hooks)
    return n


def test_remove_leaves_no_hooks_and_is_idempotent():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    crit = nn.CrossEntropyLoss()
    assert _hook_counts(model, opt) == 0
    rec = Recorder(model, opt, crit)
    assert _hook_counts(model, opt) > 0
    rec.inst.remove()
    rec.inst.remove()
    assert _hook_counts(model, opt) == 0
    assert len(crit._forward_hooks) == 0
    x, y = batches((4, 12), 4)()
    crit(model(x), y).backward()
    opt.step()
    assert rec.packets == []


def test_a_failing_statistic_warns_once_and_training_goes_on(monkeypatch):
    model = mlp()

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(S, "flag_moment", broken)
    monkeypatch.setattr(S, "moments", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rec, _ = train(model, batches((8, 12), 4), steps=3, recorder_kwargs={})
    msgs = [str(w.message) for w in caught if "tb_neuraldbg" in str(w.message)]
    assert len(msgs) == 1 and "forward" in msgs[0] and "boom" in msgs[0]  # once
    assert len(rec.packets) == 3  # the other parts still record
    assert rec.value("0", "grad_norm") > 0
    assert rec.value("<input>", "act_absmax") > 0
    assert np.isnan(rec.value("0", "act_mean"))


@pytest.mark.parametrize("mode", ["replay", "every_step"])
def test_what_cheap_steps_measure(mode):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    rec, _ = train(model, batches((4, 6), 2), steps=12, lr=0.0, recorder_kwargs=dict(nonfinite=mode))
    assert not np.isnan(rec.value("1", "act_mean", 10))  # a full step
    # Cheap: "replay" measures no module (finite gradients, loss and batch
    # say none had a non-finite value); "every_step" the flag of each, but
    # a pointwise module after its input's row inherits that row's flag.
    assert np.isnan(rec.value("1", "act_mean", 11))
    assert np.isnan(rec.value("0", "act_mean", 11)) == (mode == "replay")
    assert rec.value("0", "act_nonfinite", 11) == 0 and rec.value("1", "act_nonfinite", 11) == 0
    assert rec.value("2", "gout_nonfinite", 11) == 0
    assert rec.value("0", "grad_norm", 11) > 0  # every step
    with torch.no_grad():
        model[0].bias[0] = math.nan
    opt = rec.inst.optimizer
    x, y = batches((4, 6), 2)()
    opt.zero_grad()
    nn.CrossEntropyLoss()(model(x), y).backward()
    opt.step()  # step 12: cheap
    # replay: exact at once (4 samples); every_step: the flag first
    n = 4 if mode == "replay" else 1
    assert rec.value("0", "act_nonfinite") == n and rec.value("1", "act_nonfinite") == n
    assert rec.value("0", "in_nonfinite") == 0


@pytest.mark.parametrize("mode", ["replay", "every_step"])
def test_hyperparameters_a_group_lacks_are_no_non_finite_values(mode):
    # Adagrad has no momentum, and the first layer is in no group (a bug the
    # diagnosis reports): their columns are NaN, but they are not measured
    # values, so no clean step counts as one with a non-finite value:
    # every_step stays on its flags, and the batch kept as a NaN's is the
    # NaN step's (on the CPU, where a step's values are on the host at once).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.Adagrad(model[2].parameters(), lr=0.01)
    crit = nn.CrossEntropyLoss()
    rec = Recorder(model, opt, crit, nonfinite=mode)
    make = batches((4, 6), 2)
    for step in range(8):
        x, y = make()
        if step == 6:
            x = x.clone()
            x[1, 2] = math.nan
        opt.zero_grad()
        crit(model(x), y).backward()
        opt.step()
        if step == 5:
            assert not rec.inst.exact and rec.inst.batches._suspect is None
    assert np.isnan(rec.value("2", "momentum", 5)) and np.isnan(rec.value("0", "lr", 5))
    assert rec.value("2", "lr", 5) == pytest.approx(0.01) and rec.value("0", "opt_group", 5) == -1
    assert rec.value("<input>", "act_nonfinite", 6) == 1
    if DEVICE.type == "cpu":
        assert rec.inst.batches._suspect[0] == 6


def test_a_dirty_step_keeps_its_batch_where_its_values_reach_the_host_later(monkeypatch):
    # On CUDA a step's values reach the host after the step (host_finite says
    # None): the replay's check, which reads them before the update, keeps
    # the NaN step's batch, whatever the worker's lag.
    from tb_neuraldbg.training import batches as B

    monkeypatch.setattr(B, "host_finite", lambda host: None)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    crit = nn.CrossEntropyLoss()
    rec = Recorder(model, opt, crit)
    make = batches((4, 6), 2)
    for step in range(9):
        x, y = make()
        if step in (5, 7):
            x = x.clone()
            x[1, 2] = math.nan
        opt.zero_grad()
        crit(model(x), y).backward()
        opt.step()
    kept = rec.inst.batches._suspect
    assert kept is not None and kept[0] == 5 and torch.isnan(kept[1][0]).any()
    assert rec.value("<input>", "act_nonfinite", 5) == 1


def test_update_ratio_and_weight_norm_follow_their_cadence():
    model = mlp()
    rec, _ = train(model, batches((8, 12), 4), steps=12, recorder_kwargs=dict(stats_every=5, update_every=10))
    measured = [not np.isnan(rec.value("0", "update_ratio", s)) for s in range(12)]
    assert measured == [True] * 5 + [False] * 5 + [True, False]  # warm-up, then every 10th
    weights = [not np.isnan(rec.value("0", "weight_norm", s)) for s in range(12)]
    assert weights == [True] * 6 + [False] * 4 + [True, False]  # full steps: < 5, 5, 10
    assert not np.isnan(rec.value("0", "grad_norm", 11))  # every step


def test_num_classes_of_a_cross_entropy_criterion():
    rec, _ = train(mlp(), batches((8, 12), 4), steps=1, recorder_kwargs={})
    assert rec.inst.num_classes == 4


@pytest.mark.parametrize("bad", [dict(stats_every=0), dict(hist_every=-1), dict(on_error="ignore"),
                                 dict(max_layers=0), dict(update_every=1.5)])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError):
        WatchConfig(**bad)


def test_update_every_zero_never_copies_weights():
    rec, _ = train(mlp(), batches((8, 12), 4), steps=2, recorder_kwargs=dict(update_every=0))
    assert np.isnan(rec.value("0", "update_ratio", 0)) and not np.isnan(rec.value("0", "weight_norm", 0))


# -- gradient w.r.t. module outputs, frozen parameters, bounds, inputs ---------


def _bad_backward_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), InfBackward(), nn.Linear(8, 3))


def test_output_gradient_shows_where_a_nonfinite_is_born_in_backward():
    model = _bad_backward_model()

    def keep_weights():  # after the measurement, before the update: no NaN weights
        for p in model.parameters():
            p.grad.zero_()

    rec, _ = train(model, batches((4, 6), 3), steps=2, lr=0.1, recorder_kwargs={}, hook=keep_weights)
    names = rec.names
    assert names[1:5] == ["0", "1", "2", "3"]
    # The module whose backward makes the inf: its output gradient is finite...
    assert rec.value("2", "gout_nonfinite") == 0
    assert rec.value("3", "gout_nonfinite") == 0
    # ... the one before it (forward order) receives it.
    assert rec.value("1", "gout_nonfinite") > 0
    assert rec.value("0", "gout_nonfinite") > 0
    assert rec.value("0", "grad_nonfinite") > 0 and rec.value("3", "grad_nonfinite") == 0
    # Pseudo-rows have no output gradient.
    for pseudo in ("<input>", "<loss>", "<optimizer>"):
        assert np.isnan(rec.value(pseudo, "gout_nonfinite"))
    # Replayed (step 0 and 1 are full steps): exact counts, every element
    # of the Tanh output's gradient (4 x 8) is inf or NaN.
    assert rec.inst.replays == 2
    assert rec.value("1", "gout_nonfinite") == 32 and rec.value("2", "gout_nonfinite") == 0
    assert rec.value("0", "grad_nonfinite") == 6 * 8 + 8


def test_output_gradient_of_a_healthy_model_is_finite_everywhere():
    model = nn.Sequential(FunctionalMLP(), nn.ReLU(), nn.Linear(3, 3))
    rec, _ = train(model, batches((8, 10), 3), steps=12, recorder_kwargs={})
    for i in (-1, 10, 0):  # a cheap step, a full step, the first step
        row = rec.row(i)
        modules = [rec.names.index(n) for n in ("0.fc1", "0.fc2", "1", "2")]
        assert (row[modules, M["gout_nonfinite"]] == 0).all()


@pytest.mark.parametrize("mode", ["replay", "every_step"])
def test_a_clean_full_step_of_replay_reads_no_output_gradient_and_implies_none(mode, monkeypatch):
    """nonfinite="replay": a non-finite output gradient would reach a
    parameter's gradient (then the step is replayed, reading every output
    gradient) or nothing that trains, so full steps read none; where the
    step's evidence is clean the flag is 0 for each module whose output
    required grad, NaN where it did not (a first module without parameters
    on a batch without grad), as every_step's measured flags say."""
    from tb_neuraldbg.training.hooks.forward import ForwardHooks

    read = []
    real = ForwardHooks._measure_gout

    def spy(self, row, g, flag=True, norm_key=None):  # (the flags read; a full step reads norms for bwd_gain)
        if flag:
            read.append(row)
        return real(self, row, g, flag, norm_key)

    monkeypatch.setattr(ForwardHooks, "_measure_gout", spy)
    torch.manual_seed(0)
    model = nn.Sequential(nn.ReLU(), nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    rec, _ = train(model, batches((4, 6), 3), steps=12, recorder_kwargs={"stats_every": 5, "nonfinite": mode})
    assert bool(read) == (mode == "every_step")
    names = rec.names
    for i in (0, 5, 10):  # full steps
        row = rec.row(i)
        assert np.isnan(row[names.index("0"), M["gout_nonfinite"]])
        assert (row[[names.index(n) for n in ("1", "2", "3")], M["gout_nonfinite"]] == 0).all()
        for pseudo in ("<input>", "<loss>", "<optimizer>"):
            assert np.isnan(row[names.index(pseudo), M["gout_nonfinite"]])


def test_output_gradient_hook_does_not_outlive_the_step():
    model = _bad_backward_model()
    rec = Recorder(model, torch.optim.SGD(model.parameters(), lr=0.0), nn.CrossEntropyLoss())
    x, y = batches((4, 6), 3)()
    out = model(x)  # forward of step 0, no backward yet
    rec.inst.optimizer.step()  # step 0 committed without backward
    # A backward after the step was committed must not add to step 1; its
    # non-finite gradients cannot be replayed (no forward in step 1).
    nn.CrossEntropyLoss()(out, y).backward()
    with pytest.warns(RuntimeWarning, match="step 1 has non-finite values but cannot be replayed"):
        rec.inst.optimizer.step()
    assert rec.inst.mode == "every_step"
    # (Nor is a flag implied: the step's evidence is not clean.)
    assert np.isnan(rec.row(-1)[1:5, M["gout_nonfinite"]]).all()
    # A parameter returned as a module's output gets no hook (a leaf keeps it).
    class ReturnsWeight(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))

        def forward(self, x):
            return self.w

    m = ReturnsWeight()
    Recorder(m, torch.optim.SGD(m.parameters(), lr=0.0))
    m(torch.ones(1))
    assert not m.w._backward_hooks


def test_sum_reduced_cross_entropy_gives_no_num_classes():
    model = mlp()
    rec = Recorder(model, torch.optim.SGD(model.parameters(), lr=0.0), nn.CrossEntropyLoss(reduction="sum"))
    x, y = batches((8, 12), 4)()
    nn.CrossEntropyLoss(reduction="sum")(model(x), y)  # not the watched criterion
    rec.inst.criterion(model(x), y).backward()
    rec.inst.optimizer.step()
    assert rec.inst.num_classes is None
    rec2 = Recorder(mlp(), None, nn.NLLLoss(reduction="mean"))
    rec2.inst.criterion(F.log_softmax(rec2.inst.model(x), 1), y)
    assert rec2.inst.num_classes == 4


def test_parameters_frozen_after_watch_are_not_missing_gradients():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    rec = Recorder(model, opt, nn.CrossEntropyLoss())
    model[0].weight.requires_grad_(False)  # frozen after watch()
    model[2].requires_grad_(False)  # a whole row frozen
    x, y = batches((8, 12), 4)()
    opt.zero_grad()
    rec.inst.criterion(model(x), y).backward()
    opt.step()
    assert rec.value("0", "grad_missing") == 0
    assert rec.value("0", "grad_norm") == pytest.approx(float(model[0].bias.grad.norm()), rel=1e-5)
    assert np.isnan(rec.value("2", "grad_missing")) and np.isnan(rec.value("2", "grad_norm"))
    assert rec.value("4", "grad_missing") == 0
    # A parameter that requires grad and got none is still reported.
    model[0].weight.requires_grad_(True)
    model[0].weight.grad = None
    opt.zero_grad()
    rec.inst.criterion(model[1:](torch.randn(8, 32)), y).backward()  # row 0 not used
    opt.step()
    assert rec.value("4", "grad_missing") == 0


def test_relu6_saturation_counts_only_the_top_end():
    x = torch.tensor([[-3.0, -1.0, 0.5, 3.0, 6.0, 7.0, 9.0, 1.0]])
    for m, expected in ((nn.ReLU6(), 3 / 8), (nn.Hardtanh(0.0, 2.0), 4 / 8), (nn.Hardtanh(-1.0, 1.0), 7 / 8)):
        model = nn.Sequential(nn.Linear(8, 8), m)
        with torch.no_grad():
            model[0].weight.copy_(torch.eye(8))
            model[0].bias.zero_()
        rec = Recorder(model)
        model(x).sum().backward()
        rec.inst.record(loss=0.0)
        assert rec.value("1", "act_sat_frac") == pytest.approx(expected), m


class InplaceBetween(nn.Module):
    """A NaN written in place into fc1's output before fc2 reads it."""

    def __init__(self, inplace_relu=False):
        super().__init__()
        self.fc1 = nn.Linear(4, 6)
        self.act = nn.ReLU(inplace=True) if inplace_relu else None
        self.fc2 = nn.Linear(6, 2)
        self.poison = False

    def forward(self, x):
        h = self.fc1(x)
        if self.act is not None:
            h = self.act(h)
        if self.poison:
            h[0, 0] = math.nan
        return self.fc2(h)


@pytest.mark.parametrize("step_kind", ["full", "cheap"])
def test_input_modified_in_place_after_the_previous_row_is_measured(step_kind):
    torch.manual_seed(0)
    model = InplaceBetween()
    rec = Recorder(model, stats_every=1 if step_kind == "full" else 5)
    x = torch.randn(3, 4)
    for poison in (False, True):  # step 0 full; step 1 cheap unless stats_every=1
        model.poison = poison
        model(x).sum().backward()
        rec.inst.record(loss=0.0)
    assert rec.value("fc1", "act_nonfinite") == 0  # measured before the write
    assert rec.value("fc2", "in_nonfinite") == 1  # its actual input: one NaN
    assert rec.value("fc2", "act_nonfinite") == 2  # both outputs of that sample


def test_inplace_activation_input_is_the_previous_rows_output():
    torch.manual_seed(0)
    model = InplaceBetween(inplace_relu=True)
    rec = Recorder(model)
    x = torch.randn(64, 4)
    with torch.no_grad():
        ref = model.fc1(x)
    model(x).sum().backward()
    rec.inst.record(loss=0.0)
    # The in-place ReLU overwrote its input; its in_* are fc1's output
    # (measured before), not the ReLU's own output.
    assert rec.value("act", "in_zero_frac") == pytest.approx(float((ref == 0).float().mean()))
    assert rec.value("act", "act_zero_frac") == pytest.approx(float((ref <= 0).float().mean()))
    assert rec.value("fc2", "in_zero_frac") == pytest.approx(float((ref <= 0).float().mean()))


# -- teaching the table a type of your own ----------------------------------


class FusedAttention(nn.Module):
    """Self-attention that uses its children's weights without calling them
    (as nn.MultiheadAttention does with out_proj)."""

    def __init__(self, d=8):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        q, k, v = F.linear(x, self.qkv.weight, self.qkv.bias).chunk(3, dim=-1)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1) @ v
        return F.linear(a, self.proj.weight, self.proj.bias)


class AttentionNet(nn.Module):
    def __init__(self, attention):
        super().__init__()
        torch.manual_seed(0)
        self.attn = attention()
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.attn(x).mean(1))


def test_a_registered_atomic_type_is_one_row_owning_its_childrens_weights():
    from tb_neuraldbg import Behaviour, register_module

    class Unregistered(FusedAttention):
        pass

    class Registered(FusedAttention):
        pass

    register_module(Registered, Behaviour(atomic=True))
    # Unknown: a container whose children (never called) would be the rows.
    assert [n for n, _ in select_modules(AttentionNet(Unregistered))] == ["attn.qkv", "attn.proj", "head"]
    rec, _ = train(AttentionNet(Unregistered), batches((4, 5, 8), 3), steps=1, recorder_kwargs={})
    assert rec.names == ["<input>", "head", "<loss>", "<optimizer>"]  # attention unseen

    model = AttentionNet(Registered)
    assert [n for n, _ in select_modules(model)] == ["attn", "head"]
    rec, refs = train(model, batches((4, 5, 8), 3), steps=2, recorder_kwargs={},
                      hook=lambda: layer_grad_norm(model.attn))
    assert rec.names == ["<input>", "attn", "head", "<loss>", "<optimizer>"]
    assert rec.value("attn", "grad_norm") == pytest.approx(refs[-1], rel=1e-5)


def test_a_registered_bounded_activation_gets_its_saturation_measured():
    from tb_neuraldbg import Behaviour, register_module
    from tb_neuraldbg.training.modules import behaviour_of

    class Clamp01(nn.Module):
        def forward(self, x):
            return x.clamp(0.0, 1.0)

    def model():
        torch.manual_seed(2)
        return nn.Sequential(nn.Linear(6, 40), Clamp01(), nn.Linear(40, 2))

    rec, _ = train(model(), batches((16, 6), 2), steps=1, lr=0.0, recorder_kwargs={})
    assert np.isnan(rec.value("1", "act_sat_frac"))  # not known to be bounded

    register_module(Clamp01, Behaviour(saturation=lambda m: (0.0, 1.0), pointwise=True))
    m = model()
    outs, handles = capture_outputs(m[1])
    rec, _ = train(m, batches((16, 6), 2), steps=1, lr=0.0, recorder_kwargs={})
    y = outs[m[1]].detach()
    sat = ((y <= 0) | (y >= 1)).float().mean().item()
    assert 0.2 < sat < 1
    assert rec.value("1", "act_sat_frac") == pytest.approx(sat)
    for hd in handles:
        hd.remove()

    class Sub(Clamp01):  # subclasses inherit the entry
        pass

    assert behaviour_of(Sub) is behaviour_of(Clamp01()) is behaviour_of(Clamp01)
    assert behaviour_of(Sub).saturation(Sub()) == (0.0, 1.0)


def test_register_module_refuses_to_replace_unless_asked_and_bad_input():
    from tb_neuraldbg import Behaviour, register_module
    from tb_neuraldbg.training.modules import MODULE_TABLE, behaviour_of

    class Block(nn.Module):
        pass

    register_module(Block, Behaviour(atomic=True))
    with pytest.raises(ValueError, match="already has a Behaviour.*overwrite=True"):
        register_module(Block, Behaviour(watch=False))
    assert behaviour_of(Block).atomic
    register_module(Block, Behaviour(watch=False), overwrite=True)
    assert behaviour_of(Block) == Behaviour(watch=False)

    gelu = behaviour_of(nn.GELU)
    with pytest.raises(ValueError, match="GELU already has"):
        register_module(nn.GELU, Behaviour())  # a built-in entry too
    assert behaviour_of(nn.GELU) is gelu
    with pytest.raises(ValueError, match="every module"):
        register_module(nn.Module, Behaviour())
    with pytest.raises(TypeError, match="nn.Module subclass"):
        register_module(nn.Linear(2, 2), Behaviour())  # an instance, not a type
    with pytest.raises(TypeError, match="nn.Module subclass"):
        register_module(int, Behaviour())
    with pytest.raises(TypeError, match="needs a Behaviour"):
        register_module(Block, {"atomic": True}, overwrite=True)
    with pytest.raises(TypeError, match="saturation"):
        Behaviour(saturation=(0.0, 1.0))
    with pytest.raises(TypeError, match="atomic must be a bool"):
        Behaviour(atomic="yes")
    with pytest.raises(TypeError):
        MODULE_TABLE[Block] = Behaviour()  # read-only: register_module() adds
    assert behaviour_of(Block) == Behaviour(watch=False)


# -- cheap steps without module hooks -----------------------------------------


class Probed(nn.Module):
    """An MLP that notes, at each forward, the forward hooks its layers carry
    (the hooks PyTorch calls them with), and may run ``enc`` without autograd."""

    def __init__(self, frozen_enc=False):
        super().__init__()
        self.enc, self.fc1, self.act, self.fc2 = nn.Linear(8, 8), nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)
        self.frozen_enc = frozen_enc
        self.seen = []

    def forward(self, x):
        self.seen.append([list(m._forward_hooks.values()) for m in (self.fc1, self.act, self.fc2)])
        with torch.set_grad_enabled(not self.frozen_enc and torch.is_grad_enabled()):
            x = self.enc(x)
        return self.fc2(self.act(self.fc1(x)))


def test_cheap_steps_call_the_modules_without_hooks_and_keep_their_rows():
    """nonfinite="replay": a cheap step's module hooks would only note that
    their module ran, so they are off (PyTorch's fast call path) and on again
    for a full step; a module with a hook of its own keeps ours, first. The
    rows still say which modules ran, and which ran without autograd."""
    torch.manual_seed(0)
    model = Probed(frozen_enc=True)
    model.enc.requires_grad_(False)  # a frozen encoder: no gradient expected
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    crit = nn.CrossEntropyLoss()
    rec = Recorder(model, opt, crit, stats_every=4)
    ours = list(model.fc2._forward_hooks.values())[0]
    model.fc2.register_forward_hook(lambda m, a, o: None)  # the user's, after watch()
    for s in range(12):
        opt.zero_grad()
        crit(model(torch.randn(4, 8)), torch.arange(4) % 3).backward()
        opt.step()
    full = [s < 4 or s % 4 == 0 for s in range(12)]
    # Off from the second cheap-step schedule on: the model's own input hook
    # has to have seen a step first (step 4 is the first after step 3's).
    on = [len(fc1) for fc1, _, _ in model.seen]
    assert on == [1, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 0]
    assert [len(act) for _, act, _ in model.seen] == on
    assert all(len(fc2) == 2 and fc2[0] is ours for _, _, fc2 in model.seen)
    for s in range(12):
        for layer in ("fc1", "act", "fc2"):
            assert rec.value(layer, "act_nonfinite", s) == 0, (s, layer)  # ran, and checked
            assert rec.value(layer, "ran_without_grad", s) != 1
        assert rec.value("enc", "ran_without_grad", s) == 1, s  # every step, hooked or not
        assert math.isfinite(rec.value("fc1", "act_mean", s)) == full[s]
    rec.inst.remove()
    assert all(not m._forward_hooks for m in (model.fc1, model.act, model.enc))
    assert len(model.fc2._forward_hooks) == 1  # only the user's


def test_hooks_stay_on_when_the_model_forward_is_not_seen():
    """A loop that calls the watched modules directly (no model forward for
    the input hook to see) keeps every module hook at every step: they are
    how its steps are followed."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    crit = nn.CrossEntropyLoss()
    rec = Recorder(model, opt, crit, stats_every=2)
    counts = []
    for s in range(6):
        opt.zero_grad()
        counts.append(len(model[0]._forward_hooks))
        x = torch.randn(4, 8)
        for m in model:  # not model(x)
            x = m(x)
        crit(x, torch.arange(4) % 3).backward()
        opt.step()
    assert counts == [1] * 6
    assert rec.value("0", "act_nonfinite", 5) == 0


def test_hooks_stay_on_with_a_warning_when_they_cannot_come_off(monkeypatch):
    """PyTorch's hook dicts not as expected (another version): a warning,
    every hook back on, and the steps measured as before."""
    import tb_neuraldbg.training.hooks.module_hooks as module_hooks

    calls = []

    def broken(m, hook_id):
        calls.append(m)
        if len(calls) > 1:  # the first module already off
            raise AttributeError("_forward_hooks_with_kwargs")
        return True

    monkeypatch.setattr(module_hooks, "_alone", broken)
    torch.manual_seed(0)
    model = Probed()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    crit = nn.CrossEntropyLoss()
    rec = Recorder(model, opt, crit, stats_every=2)
    with pytest.warns(RuntimeWarning, match="cheap steps without module hooks"):
        for s in range(6):
            opt.zero_grad()
            crit(model(torch.randn(4, 8)), torch.arange(4) % 3).backward()
            opt.step()
    assert all(len(fc1) == len(act) == 1 for fc1, act, _ in model.seen)
    assert rec.value("fc1", "act_mean", 4) == rec.value("fc1", "act_mean", 4)  # measured (not NaN)
    assert rec.value("act", "act_nonfinite", 5) == 0


class Routed(nn.Module):
    """fc -> expert -> head, the expert skipped when ``route`` is off (an
    unrouted expert: its parameters get no gradient, as in a mixture of experts)."""

    def __init__(self):
        super().__init__()
        self.fc, self.expert, self.head = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 3)
        self.route = True
        self.seen = []

    def forward(self, x):
        self.seen.append(len(self.fc._forward_hooks))
        h = self.fc(x)
        return self.head(self.expert(h) if self.route else h)


def test_a_module_without_a_gradient_is_not_said_to_have_run_and_brings_the_hooks_back():
    """A cheap step without hooks cannot see that a module did not run. When
    a trainable parameter gets no gradient (an unrouted expert), its row is
    not said to have run (so a healthy mixture of experts shows no module
    "without a gradient although it ran") and the hooks are on from the next
    step while that lasts."""
    torch.manual_seed(0)
    model = Routed()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    crit = nn.CrossEntropyLoss()
    rec = Recorder(model, opt, crit, stats_every=4)
    for s in range(10):
        model.route = s <= 5  # routed through step 5, then never
        opt.zero_grad(set_to_none=True)
        crit(model(torch.randn(4, 8)), torch.arange(4) % 3).backward()
        opt.step()
    # steps 0-4 full; 5 cheap without hooks (every gradient at step 4);
    # 6 without hooks, the expert skipped; hooks back from 7 on
    assert model.seen == [1, 1, 1, 1, 1, 0, 0, 1, 1, 1]
    assert rec.value("expert", "act_nonfinite", 5) == 0  # ran, no hook: as at step 4
    for s in (6, 7, 9):  # did not run: not said to have (NaN), with or without hooks
        assert math.isnan(rec.value("expert", "act_nonfinite", s)), s
        assert rec.value("expert", "grad_missing", s) == 2
    assert rec.value("fc", "act_nonfinite", 6) == 0 and rec.value("head", "act_nonfinite", 6) == 0
