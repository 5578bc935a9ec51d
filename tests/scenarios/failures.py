"""Planted failures: each scenario breaks one thing at a known step.

Every ``Case`` carries the expected root cause: the kind(s) accepted, the
layer (a module name from ``model.named_modules()`` or a pseudo-layer) and the
onset step with a tolerance window. Planted steps are deliberately not
multiples of the writer's ``stats_every`` (10), so onsets of statistics that
are measured every Nth step are tested honestly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch import nn

from .harness import Spec


@dataclass
class Case:
    spec: Spec
    kinds: tuple  # accepted root-cause kinds
    layer: str
    onset: int | None
    tolerance: int = 0  # |root step - onset| allowed
    replay: dict = field(default_factory=dict)  # Engine kwargs for an offline replay
    #: the same run without the bug (``truth`` compares the two)
    fixed: Spec | None = None
    #: truth(result, fixed_result): asserts, on the raw statistics and losses
    #: and without the diagnosis, that the planted fault is real and where
    #: the case says (layer, onset)
    truth: Callable[..., None] | None = None
    #: for a fault whose onset is not planted at a step (it appears when the
    #: training gets there): measure_onset(result) measures it, on the raw
    #: statistics of the run, and ``onset`` is None
    measure_onset: Callable[..., int] | None = None


def _teacher(d_in=16, k=4, batch=32, seed=1):
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(d_in, k, generator=g)

    def batch_fn(step):
        gs = torch.Generator().manual_seed(100 + step)
        x = torch.randn(batch, d_in, generator=gs)
        return x, (x @ teacher).argmax(1)

    return batch_fn


def _mlp(act=nn.ReLU, width=32, depth=4, d_in=16, k=4):
    layers, d = [], d_in
    for _ in range(depth - 1):
        layers += [nn.Linear(d, width), act()]
        d = width
    return nn.Sequential(*layers, nn.Linear(d, k))


def _sgd(model, lr=0.05, momentum=0.9):
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)


def _set_lr(opt, lr):
    for g in opt.param_groups:
        g["lr"] = lr


# --- vanishing ------------------------------------------------------------------


def saturating_layer(at=45):
    """A tanh MLP whose third Linear is scaled x50 at step ``at``: the tanh
    after it saturates and the gradients before it vanish."""
    def build():
        model = _mlp(nn.Tanh, depth=5)
        return model, _sgd(model, 0.02), nn.CrossEntropyLoss(), None

    def plant(step, model, opt):
        if step == at:
            with torch.no_grad():
                model[4].weight.mul_(100.0)
                model[4].bias.fill_(5.0)

    # saturation is measured every stats_every (10) steps: the onset is the
    # first measurement after the plant
    return Case(Spec("saturating_layer", build, _teacher(), steps=120, plant=plant),
                ("saturated_activation",), "5", at, tolerance=10)


def deep_sigmoid():
    """12 sigmoid layers: gradients vanish from step 0 (born failing)."""
    def build():
        model = _mlp(nn.Sigmoid, width=32, depth=12)
        return model, _sgd(model, 0.1), nn.CrossEntropyLoss(), None

    return Case(Spec("deep_sigmoid", build, _teacher(), steps=60), ("vanishing_gradient",), "*", 0)


# --- exploding ------------------------------------------------------------------


def large_init_layer():
    """The second Linear initialised x1000."""
    def build():
        model = _mlp(nn.ReLU, depth=5)
        with torch.no_grad():
            model[2].weight.mul_(1000.0)
        return model, _sgd(model, 0.01, 0.0), nn.CrossEntropyLoss(), None

    return Case(Spec("large_init_layer", build, _teacher(), steps=40),
                ("activation_explosion", "exploding_gradient"), "2", 0)


def lr_jump_explosion(at=63):
    """SGD with momentum at lr 0.01, raised x200 at step ``at``."""
    def build():
        model = _mlp(nn.ReLU, depth=4, width=64)
        return model, _sgd(model, 0.01, 0.9), nn.CrossEntropyLoss(), None

    def plant(step, model, opt):
        if step == at:
            _set_lr(opt, 2.0)

    return Case(Spec("lr_jump_explosion", build, _teacher(), steps=100, plant=plant),
                ("exploding_gradient", "activation_explosion", "loss_spike", "nonfinite"), "<optimizer>", at)


# --- non-finite -----------------------------------------------------------------


class _Custom(nn.Module):
    """x * 1 until switched on, then sqrt(x): NaN for negative inputs."""

    def __init__(self):
        super().__init__()
        self.on = False

    def forward(self, x):
        return torch.sqrt(x) if self.on else x * 1.0


def forward_nan(at=57):
    def build():
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), _Custom(), nn.ReLU(),
                              nn.Linear(32, 4))
        return model, _sgd(model), nn.CrossEntropyLoss(), None

    def plant(step, model, opt):
        model[3].on = step >= at

    return Case(Spec("forward_nan", build, _teacher(), steps=80, plant=plant), ("nonfinite",), "3", at)


class _InfGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * float("inf")


class _ScaledLinear(nn.Linear):
    """A Linear whose output goes through a custom op that, once switched on,
    returns an infinite gradient in backward (forward stays finite)."""

    on = False

    def forward(self, x):
        y = super().forward(x)
        return _InfGrad.apply(y) if self.on else y


def backward_inf(at=57, amp=False, steps=80):
    def build():
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), _ScaledLinear(32, 32), nn.ReLU(),
                              nn.Linear(32, 4))
        return model, _sgd(model), nn.CrossEntropyLoss(), None

    def plant(step, model, opt):
        model[2].on = step >= at

    name = "amp_scaler_collapse" if amp else "backward_inf"
    spec = Spec(name, build, _teacher(), steps=steps, plant=plant, amp=amp)
    # under a GradScaler too, the root is where the inf is born (the scale's
    # collapse, its symptom, is reported as well); the first skipped step is
    # the one after the scale was recorded, hence the tolerance
    return Case(spec, ("nonfinite",), "2", at, tolerance=1 if amp else 0)


class _InfBackward(nn.Module):
    """A parameterless module: identity in forward through a custom op whose
    backward, once switched on, returns an infinite gradient."""

    on = False

    def forward(self, x):
        return _InfGrad.apply(x) if self.on else x * 1.0


def backward_inf_parameterless(at=47):
    """Born in the backward of a module without parameters: its output gradient
    is finite, the one it passes on (to the Linear before it) is not. Needs the
    output-gradient flags (gout_nonfinite): the deepest layer with non-finite
    parameter gradients would be the Linear before it."""

    def build():
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), _InfBackward(),
                              nn.Linear(32, 4))
        return model, _sgd(model), nn.CrossEntropyLoss(), None

    def plant(step, model, opt):
        model[3].on = step >= at

    return Case(Spec("backward_inf_parameterless", build, _teacher(), steps=70, plant=plant),
                ("nonfinite",), "3", at)


# --- dead -----------------------------------------------------------------------


def dead_negative_bias():
    def build():
        model = _mlp(nn.ReLU, depth=4)
        with torch.no_grad():
            model[2].bias.fill_(-10.0)
        return model, _sgd(model, 0.05), nn.CrossEntropyLoss(), None

    return Case(Spec("dead_negative_bias", build, _teacher(), steps=40), ("dead_activation",), "3", 0)


class _FunctionalNet(nn.Module):
    """ReLUs applied with torch.relu inside forward: no activation modules."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def dead_functional_relu():
    def build():
        model = _FunctionalNet()
        with torch.no_grad():
            model.fc2.bias.fill_(-10.0)
        return model, _sgd(model, 0.05), nn.CrossEntropyLoss(), None

    return Case(Spec("dead_functional_relu", build, _teacher(), steps=40), ("dead_activation",), "fc2", 0)


def dead_lr_jump(at=63):
    def build():
        model = _mlp(nn.ReLU, depth=4, width=64)
        return model, _sgd(model, 0.01, 0.0), nn.CrossEntropyLoss(), None

    def plant(step, model, opt):
        if step == at:
            _set_lr(opt, 5.0)  # the ReLUs die over the next steps, without a blow-up

    return Case(Spec("dead_lr_jump", build, _teacher(), steps=110, plant=plant),
                ("dead_activation",), "<optimizer>", at)


def saturated_tanh():
    def build():
        model = _mlp(nn.Tanh, depth=4)
        with torch.no_grad():
            model[2].weight.mul_(30.0)
        return model, _sgd(model, 0.05), nn.CrossEntropyLoss(), None

    return Case(Spec("saturated_tanh", build, _teacher(), steps=40), ("saturated_activation",), "3", 0)


# --- cut off --------------------------------------------------------------------


class _Detached(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1 = nn.Linear(16, 32)
        self.act = nn.ReLU()
        self.enc2 = nn.Linear(32, 32)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        h = self.enc2(self.act(self.enc1(x)))
        return self.head(torch.relu(h.detach()))  # the bug: .detach()


def detached_subgraph():
    def build():
        model = _Detached()
        return model, _sgd(model), nn.CrossEntropyLoss(), None

    return Case(Spec("detached_subgraph", build, _teacher(), steps=40), ("no_gradient",), "enc2", 0)


def missing_from_optimizer():
    def build():
        model = _mlp(nn.ReLU, depth=4)
        opt = torch.optim.Adam(model[-1].parameters(), lr=1e-3)  # the bug: only the head
        return model, opt, nn.CrossEntropyLoss(), None

    return Case(Spec("missing_from_optimizer", build, _teacher(), steps=40), ("frozen_weights",), "4", 0)


# --- data -----------------------------------------------------------------------


def bad_batch(kind, at=63):
    base = _teacher()

    def batch_fn(step):
        x, y = base(step)
        if step == at:
            if kind == "nan":
                x = x.clone()
                x[3, 5] = float("nan")
            elif kind == "scale":
                x = x * 1000.0
            else:
                x = torch.ones_like(x)
        return x, y

    def build():
        model = _mlp(nn.ReLU, depth=4)
        return model, torch.optim.Adam(model.parameters(), lr=1e-3), nn.CrossEntropyLoss(), None

    return Case(Spec(f"bad_batch_{kind}", build, batch_fn, steps=90), ("data_anomaly",), "<input>", at)


# --- loss -----------------------------------------------------------------------


def unlearnable_labels():
    def batch_fn(step):
        gs = torch.Generator().manual_seed(300 + step)
        return torch.randn(32, 16, generator=gs), torch.randint(0, 4, (32,), generator=gs)

    def build():
        model = _mlp(nn.ReLU, depth=3)
        return model, torch.optim.Adam(model.parameters(), lr=1e-3), nn.CrossEntropyLoss(), None

    return Case(Spec("unlearnable_labels", build, batch_fn, steps=360), ("loss_plateau",), "<loss>", 0)


def logits_x50():
    def build():
        model = _mlp(nn.ReLU, depth=3, k=10)
        with torch.no_grad():
            model[4].weight.mul_(50.0)
        return model, torch.optim.Adam(model.parameters(), lr=1e-3), nn.CrossEntropyLoss(), None

    # the writer passes K (the logits' class dimension) to its engine
    return Case(Spec("logits_x50", build, _teacher(k=10), steps=20, num_classes=10),
                ("initial_loss",), "<loss>", 0)


# --- more: born failures, the learning rate from the start, the loss itself,
# convolutions, attention, recurrent nets


class _ExplodingRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(8, 32, batch_first=True, nonlinearity="relu")
        self.head = nn.Linear(32, 4)
        with torch.no_grad():
            self.rnn.weight_hh_l0.mul_(4.0)  # spectral radius >> 1

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


def rnn_large_recurrent_init():
    def batch_fn(step):
        x = torch.randn(16, 20, 8, generator=torch.Generator().manual_seed(step))
        return x, x[:, -1, :4].argmax(1)

    def build():
        model = _ExplodingRNN()
        return model, torch.optim.SGD(model.parameters(), lr=0.01), nn.CrossEntropyLoss(), None

    return Case(Spec("rnn_large_recurrent_init", build, batch_fn, steps=30),
                ("activation_explosion", "exploding_gradient"), "rnn", 0)


def lr_too_high_from_start():
    """No jump: the learning rate is too high from the first update."""
    def build():
        model = _mlp(nn.ReLU, depth=4, width=64)
        return model, torch.optim.Adam(model.parameters(), lr=1.0), nn.CrossEntropyLoss(), None

    return Case(Spec("lr_too_high_from_start", build, _teacher(), steps=60),
                ("dead_activation", "exploding_gradient", "activation_explosion", "nonfinite", "loss_spike"),
                "<optimizer>", 0, tolerance=5)


class _LogLoss(nn.Module):
    """-log p(y), with p forced to 0 from the ``at``-th call on."""

    def __init__(self, at):
        super().__init__()
        self.calls, self.at = 0, at

    def forward(self, logits, y):
        p = torch.softmax(logits, 1).gather(1, y[:, None])
        if self.calls >= self.at:
            p = p * 0
        self.calls += 1
        return -torch.log(p).mean()


def log_zero_in_loss(at=31):
    def build():
        model = _mlp(nn.ReLU, depth=3)
        return model, _sgd(model, 0.05, 0.0), _LogLoss(at), None

    return Case(Spec("log_zero_in_loss", build, _teacher(), steps=45), ("nonfinite",), "<loss>", at)


def tiny_init_tanh():
    """Weights N(0, 0.01) in an 8-layer tanh net: signals and gradients shrink."""
    def build():
        model = _mlp(nn.Tanh, depth=8, width=64)
        for m in model:
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.01)
        return model, _sgd(model, 0.05, 0.0), nn.CrossEntropyLoss(), None

    return Case(Spec("tiny_init_tanh", build, _teacher(), steps=40), ("vanishing_gradient",), "*", 0)


def sigmoid_output_born_saturated():
    """The output sigmoid saturated at initialisation (logits x100)."""
    def batch_fn(step):
        x = torch.randn(32, 16, generator=torch.Generator().manual_seed(step))
        return x, (x[:, 0] > 0).float()[:, None]

    def build():
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1), nn.Sigmoid())
        with torch.no_grad():
            model[2].weight.mul_(100.0)
        return model, torch.optim.Adam(model.parameters(), lr=1e-3), nn.BCELoss(), None

    return Case(Spec("sigmoid_output_born_saturated", build, batch_fn, steps=30),
                ("saturated_activation",), "3", 0)


def large_init_everywhere():
    """Every Linear initialised N(0, 1): activations compound layer by layer."""
    def build():
        model = _mlp(nn.ReLU, depth=6, width=64)
        for m in model:
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=1.0)
        return model, _sgd(model, 0.01, 0.0), nn.CrossEntropyLoss(), None

    return Case(Spec("large_init_everywhere", build, _teacher(), steps=20),
                ("activation_explosion", "exploding_gradient"), "*", 0)


def unnormalised_pixels():
    """Raw 0..255 pixels into a tanh MLP: the first tanh saturates at once."""
    def batch_fn(step):
        x = torch.randint(0, 256, (32, 64), generator=torch.Generator().manual_seed(step)).float()
        return x, (x[:, 0] > 128).long()

    def build():
        model = _mlp(nn.Tanh, depth=3, d_in=64)
        return model, _sgd(model, 0.01, 0.0), nn.CrossEntropyLoss(), None

    return Case(Spec("unnormalised_pixels", build, batch_fn, steps=30), ("saturated_activation",), "<input>", 0)


def random_regression_targets():
    """MSE on targets unrelated to the inputs."""
    def batch_fn(step):
        gs = torch.Generator().manual_seed(step)
        return torch.randn(32, 16, generator=gs), torch.randn(32, 1, generator=gs)

    def build():
        model = _mlp(nn.ReLU, depth=3, k=1)
        return model, torch.optim.Adam(model.parameters(), lr=1e-3), nn.MSELoss(), None

    return Case(Spec("random_regression_targets", build, batch_fn, steps=340), ("loss_plateau",), "<loss>", 0)


def conv_dead_bias():
    def batch_fn(step):
        x = torch.randn(16, 1, 8, 8, generator=torch.Generator().manual_seed(step))
        return x, (x.mean((1, 2, 3)) > 0).long()

    def build():
        model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                              nn.Flatten(), nn.Linear(8 * 64, 2))
        with torch.no_grad():
            model[2].bias.fill_(-20.0)
        return model, _sgd(model, 0.01, 0.0), nn.CrossEntropyLoss(), None

    return Case(Spec("conv_dead_bias", build, batch_fn, steps=30), ("dead_activation",), "3", 0)


class _MaskedAttention(nn.Module):
    """From the ``at``-th forward on, every position is masked: softmax of
    all -inf inside nn.MultiheadAttention gives NaN."""

    def __init__(self, at):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = nn.Linear(16, 4)
        self.calls, self.at = 0, at

    def forward(self, x):
        h = self.emb(x)
        mask = torch.zeros(x.shape[1], x.shape[1], dtype=torch.bool)
        if self.calls >= self.at:
            mask[:] = True
        self.calls += 1
        return self.head(self.attn(h, h, h, attn_mask=mask)[0][:, 0])


def attention_all_masked(at=21):
    def batch_fn(step):
        x = torch.randint(0, 50, (8, 6), generator=torch.Generator().manual_seed(step))
        return x, x[:, 0] % 4

    def build():
        model = _MaskedAttention(at)
        return model, torch.optim.Adam(model.parameters(), lr=1e-3), nn.CrossEntropyLoss(), None

    return Case(Spec("attention_all_masked", build, batch_fn, steps=30), ("nonfinite",), "attn", at)


# --- unseen-style failures (stress round 2) --------------------------------------


def unnormalised_x1000_relu():
    """Standard-normal features x1000 into a ReLU MLP (no saturation to see):
    the loss starts far above ln K, then the activations blow up."""
    base = _teacher()

    def batch_fn(step):
        x, y = base(step)
        return x * 1000.0, y

    def build():
        model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
        return model, _sgd(model, 0.01, 0.0), nn.CrossEntropyLoss(), None

    return Case(Spec("unnormalised_x1000_relu", build, batch_fn, steps=40), ("initial_loss",), "<input>", 0,
                replay={"num_classes": 4})


def lr_growing_schedule():
    """ExponentialLR(gamma=1.1) by mistake: no single jump, the rate grows
    geometrically until the run diverges."""
    def build():
        model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
        opt = _sgd(model, 0.01, 0.9)
        return model, opt, nn.CrossEntropyLoss(), torch.optim.lr_scheduler.ExponentialLR(opt, gamma=1.1)

    return Case(Spec("lr_growing_schedule", build, _teacher(), steps=100), ("exploding_gradient",),
                "<optimizer>", 50, tolerance=15)


def conv_bias_killed(at=63):
    """A conv's bias set to -50 mid-run: the ReLU after it dies (dead
    fractions are measured every 10th step, hence the tolerance)."""
    def build():
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                              nn.Flatten(), nn.Linear(8 * 64, 4))
        return model, _sgd(model, 0.01, 0.9), nn.CrossEntropyLoss(), None

    def batch_fn(step):
        gs = torch.Generator().manual_seed(900 + step)
        x = torch.randn(16, 3, 8, 8, generator=gs)
        return x, (x.flatten(1)[:, :4]).argmax(1)

    def plant(step, model, opt):
        if step == at:
            with torch.no_grad():
                model[2].bias.fill_(-50.0)

    return Case(Spec("conv_bias_killed", build, batch_fn, steps=120, plant=plant), ("dead_activation",), "3", at,
                tolerance=10)


def middle_layer_not_in_optimizer():
    def build():
        model = _mlp(nn.Tanh, depth=3)
        params = list(model[0].parameters()) + list(model[4].parameters())  # the bug: model[2] left out
        return model, torch.optim.SGD(params, lr=0.05, momentum=0.9), nn.CrossEntropyLoss(), None

    return Case(Spec("middle_layer_not_in_optimizer", build, _teacher(), steps=40), ("frozen_weights",), "2", 0)


class _TwoBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.head = nn.Linear(16, 32), nn.Linear(16, 32), nn.Linear(64, 4)

    def forward(self, x):
        return self.head(torch.cat([torch.relu(self.a(x)), torch.relu(self.b(x)).detach()], 1))  # the bug


def detached_branch():
    def build():
        model = _TwoBranch()
        return model, torch.optim.Adam(model.parameters(), lr=1e-3), nn.CrossEntropyLoss(), None

    return Case(Spec("detached_branch", build, _teacher(), steps=40), ("no_gradient",), "b", 0)


def nan_regression_target(at=71):
    """One NaN in the targets (MSE): the loss is the first non-finite value."""
    def batch_fn(step):
        w = torch.randn(8, 1, generator=torch.Generator().manual_seed(4))
        x = torch.randn(32, 8, generator=torch.Generator().manual_seed(step))
        y = x @ w
        if step == at:
            y[5] = float("nan")
        return x, y

    def build():
        model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
        return model, torch.optim.Adam(model.parameters(), lr=1e-3), nn.MSELoss(), None

    return Case(Spec("nan_regression_target", build, batch_fn, steps=85), ("nonfinite",), "<loss>", at)


def grad_hook_amplifies(at=53):
    """A gradient hook x1e6 registered on one weight mid-run."""
    def build():
        model = _mlp(nn.ReLU, depth=3)
        return model, _sgd(model, 0.01, 0.0), nn.CrossEntropyLoss(), None

    def plant(step, model, opt):
        if step == at:
            model[2].weight.register_hook(lambda g: g * 1e6)

    return Case(Spec("grad_hook_amplifies", build, _teacher(), steps=70, plant=plant), ("exploding_gradient",),
                "2", at)


def adam_lr_one():
    def build():
        model = _mlp(nn.ReLU, depth=3, width=64)
        return model, torch.optim.Adam(model.parameters(), lr=1.0), nn.CrossEntropyLoss(), None

    # the updates either blow the layers up or kill the ReLUs: both the rate's
    return Case(Spec("adam_lr_one", build, _teacher(), steps=40), ("exploding_gradient", "dead_activation"),
                "<optimizer>", 0,
                tolerance=5)


# --- principles before rules (DESIGN.md): one general quantity each ------------------


class _ZeroGatedAdapter(nn.Module):
    """An adapter branch gated by a buffer of zeros meant to be a learnable gate."""

    def __init__(self):
        super().__init__()
        self.enc, self.adapter, self.head = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 4)
        self.register_buffer("gate", torch.zeros(32))  # the bug: a buffer, not a Parameter

    def forward(self, x):
        h = torch.relu(self.enc(x))
        return self.head(h + self.gate * self.adapter(h))


def zero_gradient_adapter():
    """A parameter in the optimizer whose gradient is exactly 0 at every step
    (multiplied by a gate of zeros): it passes no gradient, as a None one."""
    def build():
        model = _ZeroGatedAdapter()
        return model, torch.optim.Adam(model.parameters(), lr=1e-3), nn.CrossEntropyLoss(), None

    def fixed_build():
        model, opt, crit, sched = build()
        model.gate.fill_(1.0)
        return model, opt, crit, sched

    def truth(result, fixed):
        _, g = result.series("adapter", "grad_norm")
        _, gf = fixed.series("adapter", "grad_norm")
        assert (g == 0).all() and (gf > 0).all()

    return Case(Spec("zero_gradient_adapter", build, _teacher(), steps=50), ("no_gradient",), "adapter", 0,
                fixed=Spec("zero_gradient_adapter_fixed", fixed_build, _teacher(), steps=50), truth=truth)


def _regression(scale, seed=1):
    """Features N(0, scale^2), targets a linear function of the N(0, 1) ones."""
    w = torch.randn(8, 1, generator=torch.Generator().manual_seed(seed))

    def batch_fn(step):
        x = torch.randn(32, 8, generator=torch.Generator().manual_seed(step))
        return x * scale, x @ w

    return batch_fn


def _regression_mlp():
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))


def unnormalised_regression_features():
    """Raw features ~1e3 into an MLP with SGD at an ordinary 1e-3: the first
    layers' gradients are 1e3x their weights before any update, so the first
    update is far larger than the weights and the run diverges. The inputs
    are the cause, not the rate (the same rate trains normalised features)."""
    def build():
        model = _regression_mlp()
        return model, torch.optim.SGD(model.parameters(), lr=1e-3), nn.MSELoss(), None

    def truth(result, fixed):
        _, g = result.series("0", "grad_norm")
        _, w = result.series("0", "weight_norm")
        _, gf = fixed.series("0", "grad_norm")
        _, wf = fixed.series("0", "weight_norm")
        assert g[0] > 100 * w[0] and gf[0] < 10 * wf[0]  # extreme before any update, only unnormalised
        assert not np.isfinite(result.losses[-1]) and fixed.losses[-1] < 0.5 * fixed.losses[0]

    return Case(Spec("unnormalised_regression_features", build, _regression(1000.0), steps=40),
                ("nonfinite", "exploding_gradient", "activation_explosion"), "<input>", 0, tolerance=5,
                fixed=Spec("unnormalised_regression_features_fixed", build, _regression(1.0), steps=40),
                truth=truth)


def scheduler_stepped_per_batch():
    """StepLR(step_size=10, gamma=0.1) meant per epoch, stepped every batch:
    the rate, hence the updates, fall tenfold every 10 steps while the
    gradients still flow; the optimizer stops moving the model."""
    def build(per_batch=True):
        model = _mlp(nn.ReLU, depth=3)
        opt = _sgd(model, 0.05)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10 if per_batch else 1000, gamma=0.1)
        return model, opt, nn.CrossEntropyLoss(), sched

    def truth(result, fixed):
        _, u = result.series("0", "update_ratio")
        _, g = result.series("0", "grad_norm")
        u = u[np.isfinite(u)]
        assert u[-1] < 1e-6 * u.max() and g[-1] > 0.01 * g[0]  # updates collapsed, gradients flow
        assert min(fixed.losses[-10:]) < 0.7 * min(result.losses[-10:])

    # (a loss that never fell is the first symptom of a short run: the
    # schedule's collapse is named on it, as a plateau, or on the updates)
    return Case(Spec("scheduler_stepped_per_batch", build, _teacher(), steps=150), ("frozen_weights", "loss_plateau"),
                "<optimizer>", 30, tolerance=10,
                fixed=Spec("scheduler_stepped_per_batch_fixed", lambda: build(False), _teacher(), steps=150),
                truth=truth)


def learning_rate_1e9():
    """Adam at lr=1e-9 (a typo for 1e-3): the updates round away."""
    def build():
        model = _mlp(nn.ReLU, depth=3)
        return model, torch.optim.Adam(model.parameters(), lr=1e-9), nn.CrossEntropyLoss(), None

    return Case(Spec("learning_rate_1e9", build, _teacher(), steps=100), ("frozen_weights",), "<optimizer>", 0)


def regression_stuck_at_the_mean():
    """MSE on targets unrelated to the inputs but with a mean of 5: the
    model learns the mean (the loss falls from ~30), then stays at the
    targets' variance, the loss of predicting that mean."""
    def batch_fn(step):
        gs = torch.Generator().manual_seed(step)
        return torch.randn(32, 16, generator=gs), 5.0 + 2.0 * torch.randn(32, 1, generator=gs)

    def build():
        model = _mlp(nn.ReLU, depth=3, k=1)
        return model, torch.optim.Adam(model.parameters(), lr=1e-2), nn.MSELoss(), None

    def measure_onset(result):
        # the loss stopped falling: its first 50-step median within 10% of the targets' variance (4)
        losses = np.asarray(result.losses)
        med = [np.median(losses[i:i + 50]) for i in range(0, len(losses) - 50, 10)]
        return next(10 * i for i, m in enumerate(med) if m < 1.1 * 4.0)

    return Case(Spec("regression_stuck_at_the_mean", build, batch_fn, steps=450), ("loss_plateau",), "<loss>", None,
                tolerance=60, measure_onset=measure_onset)


class _TokenHead(nn.Module):
    """Token ids -> embedding -> mean -> a head initialised 50x too large."""

    def __init__(self, vocab=200, d=32, k=4):
        super().__init__()
        self.emb, self.head = nn.Embedding(vocab, d), nn.Linear(d, k)
        with torch.no_grad():
            self.head.weight.mul_(50.0)

    def forward(self, x):
        return self.head(self.emb(x).mean(1))


def token_ids_with_a_bad_head():
    """Token ids (RMS ~115) are not features: the logits scaled 50x are the
    bad initial loss, not unnormalised inputs."""
    def batch_fn(step):
        x = torch.randint(0, 200, (32, 8), generator=torch.Generator().manual_seed(7000 + step))
        return x, x[:, 0] % 4

    def build():
        model = _TokenHead()
        return model, torch.optim.Adam(model.parameters(), lr=1e-3), nn.CrossEntropyLoss(), None

    return Case(Spec("token_ids_with_a_bad_head", build, batch_fn, steps=20, num_classes=4),
                ("initial_loss",), "<loss>", 0)


def head_group_rate_1e9():
    """The head's param group at lr=1e-9 (a typo for 1e-3) beside the body's
    1e-3: the head gets gradients but moves by ~1e-9 of its weights."""
    def build():
        model = _mlp(nn.ReLU, depth=3)
        body = list(model[0].parameters()) + list(model[2].parameters())
        opt = torch.optim.Adam([{"params": body, "lr": 1e-3}, {"params": model[4].parameters(), "lr": 1e-9}])
        return model, opt, nn.CrossEntropyLoss(), None

    return Case(Spec("head_group_rate_1e9", build, _teacher(), steps=40), ("frozen_weights",), "4", 0)



# --- a fault before any update (docs/diagnosis.md, "Before any update") -------


class _FrameRegressor(nn.Module):
    """A GRU and a per-frame Linear whose frame predictions are pooled over
    200 frames: summed (the bug) or averaged (the fix)."""

    def __init__(self, pool):
        super().__init__()
        self.pool = pool
        self.gru = nn.GRU(8, 32, batch_first=True)
        self.fc = nn.Linear(32, 1)

    def forward(self, x):
        frames = self.fc(self.gru(x)[0])
        return frames.sum(1) if self.pool == "sum" else frames.mean(1)


def frame_predictions_summed():
    """A sequence regressor's frame predictions summed over 200 frames
    instead of averaged: a parameter-free x200 after the last watched
    module. Nothing is past a threshold in the forward at step 0, but fc's
    gradient is far beyond the weights it was taken on, so its first update
    is many times its weights: the rate (0.05, fine for the averaged twin)
    is not to blame, fc is where it shows (its outputs explode next)."""
    w = torch.randn(8, generator=torch.Generator().manual_seed(4))

    def batch_fn(step):
        g = torch.Generator().manual_seed(800 + step)
        level = torch.randn(32, 1, 8, generator=g)
        x = level + 0.5 * torch.randn(32, 200, 8, generator=g)
        return x, (level[:, 0] @ w).unsqueeze(1) / 3

    def spec(pool):
        def build():
            torch.manual_seed(0)
            model = _FrameRegressor(pool)
            return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), nn.MSELoss(), None

        return Spec(f"frame_predictions_summed{'' if pool == 'sum' else '_fixed'}", build, batch_fn, steps=40)

    def truth(bug, fixed):
        # step 0: fc's gradient ~100x the twin's, its first update several
        # times its weights, its output below the explosion floor; the
        # twin's loss falls, the bug's does not
        g_bug, g_fix = bug.series("fc", "grad_norm")[1][0], fixed.series("fc", "grad_norm")[1][0]
        assert g_bug > 30 * g_fix and bug.series("fc", "update_ratio")[1][0] > 2
        assert bug.series("fc", "act_std")[1][0] < 100
        assert sum(fixed.losses[-10:]) < 0.1 * sum(fixed.losses[:10]) and not bug.losses[-1] < bug.losses[0]

    return Case(spec("sum"), ("activation_explosion", "exploding_gradient"), "fc", 0, tolerance=1,
                fixed=spec("mean"), truth=truth)


def heart_rate_not_scaled():
    """A forecaster of the next heart-rate reading fed raw beats per minute
    (RMS ~75) and trained on raw targets: no layer is past a threshold at
    step 0, but the first update is far larger than the weights and the loss
    climbs from it on. The inputs were unnormalised before any update: they
    are the root, not the rate (fine for the standardised twin)."""
    def spec(raw):
        def batch_fn(step):
            g = torch.Generator().manual_seed(600 + step)
            t = torch.arange(17.0)
            base = 60 + 30 * torch.rand(32, 1, generator=g)
            s = base + 8 * torch.sin(0.4 * t + 6.28 * torch.rand(32, 1, generator=g)) + 2 * torch.randn(
                32, 17, generator=g)
            if not raw:
                s = (s - 75) / 10
            return s[:, :16], s[:, 16:]

        def build():
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
            return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), nn.MSELoss(), None

        return Spec(f"heart_rate_not_scaled{'' if raw else '_fixed'}", build, batch_fn, steps=60)

    def truth(bug, fixed):
        # step 0: the first layer's output below the explosion floor, its
        # first update larger than its weights; the bug's loss climbs, the
        # twin's falls
        assert bug.series("0", "act_std")[1][0] < 100 and bug.series("0", "update_ratio")[1][0] > 1
        assert not bug.losses[1] < 2 * bug.losses[0] and sum(fixed.losses[-10:]) < 0.5 * sum(fixed.losses[:10])

    return Case(spec(True), ("activation_explosion", "exploding_gradient", "nonfinite"), "<input>", 1,
                tolerance=1, fixed=spec(False), truth=truth)


def all_cases():
    return [
        saturating_layer(), deep_sigmoid(), large_init_layer(), lr_jump_explosion(), forward_nan(),
        backward_inf(), backward_inf_parameterless(), dead_negative_bias(), dead_functional_relu(), dead_lr_jump(), saturated_tanh(), detached_subgraph(),
        missing_from_optimizer(), bad_batch("nan"), bad_batch("scale"), bad_batch("constant"),
        unlearnable_labels(), logits_x50(), backward_inf(amp=True, steps=90),
        rnn_large_recurrent_init(), lr_too_high_from_start(), log_zero_in_loss(), tiny_init_tanh(),
        sigmoid_output_born_saturated(), large_init_everywhere(), unnormalised_pixels(),
        random_regression_targets(), conv_dead_bias(), attention_all_masked(),
        unnormalised_x1000_relu(), lr_growing_schedule(), conv_bias_killed(), middle_layer_not_in_optimizer(),
        detached_branch(), nan_regression_target(), grad_hook_amplifies(), adam_lr_one(),
        zero_gradient_adapter(), unnormalised_regression_features(), scheduler_stepped_per_batch(),
        learning_rate_1e9(), regression_stuck_at_the_mean(), token_ids_with_a_bad_head(), head_group_rate_1e9(),
        frame_predictions_summed(), heart_rate_not_scaled(),
    ]
