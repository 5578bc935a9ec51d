"""Growths that cross the explosion threshold only at a later module
(docs/diagnosis.md, "Where a growth begins"), and healthy runs whose
activations grow without exploding.

The root cause is the module where the growth began, not the one where it
became large: over depth, the first module an order of magnitude above the
batch at the explosion's step; over time, the first module whose output grew
an order of magnitude over its first measurement before the explosion.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .failures import Case
from .harness import Spec


def _signals(d_in=4, length=16, k=3, batch=32, seed=3):
    """Step -> (sequences [batch, d_in, length], class of their dominant channel)."""
    def batch_fn(step):
        g = torch.Generator().manual_seed(seed * 1000 + step)
        x = torch.randn(batch, d_in, length, generator=g)
        return x, x[:, :k].mean(2).argmax(1)

    return batch_fn


def _conv_stack(depth=6, width=16, d_in=4, k=3):
    layers, c = [], d_in
    for _ in range(depth):
        layers += [nn.Conv1d(c, width, 3, padding=1), nn.ReLU()]
        c = width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(width, k))


def conv_stack_unit_std_init():
    """A 1-d conv stack whose convolutions are initialised with std 1 (``normal_(w)``
    instead of a fan-in scaled std, the bug of He et al. ICCV 2015 sec. 2.2): every
    conv multiplies the spread by ~sqrt(fan_in / 2) ~ 5. The batch is amplified a
    thousandfold only at the fourth conv; the growth is an order of magnitude above
    the batch already at the second (row "2")."""
    def spec(bug):
        def build():
            torch.manual_seed(0)
            model = _conv_stack()
            if bug:
                for m in model:
                    if isinstance(m, nn.Conv1d):
                        nn.init.normal_(m.weight, std=1.0)
            return model, torch.optim.SGD(model.parameters(), lr=0.01), nn.CrossEntropyLoss(), None

        return Spec(f"conv_stack_unit_std_init{'' if bug else '_fixed'}", build, _signals(), steps=30)

    def truth(bug, fixed):
        _, x = bug.series("<input>", "act_std")
        ratio = {name: bug.series(name, "act_std")[1][0] / x[0] for name in ("0", "2", "4", "6")}
        assert ratio["0"] < 10 <= ratio["2"], ratio  # the growth leaves the batch's scale at "2"
        assert ratio["6"] >= 1000 * 0.1, ratio  # and compounds
        _, x_f = fixed.series("<input>", "act_std")
        assert fixed.series("6", "act_std")[1][0] < 10 * x_f[0]

    return Case(spec(True), ("activation_explosion",), "2", 0, fixed=spec(False), truth=truth)


class _CodeAE(nn.Module):
    """An autoencoder with a 4-d code between two ReLU MLPs."""

    def __init__(self, d=12):
        super().__init__()
        self.enc = nn.Linear(d, 32)
        self.code = nn.Linear(32, 4)
        self.dec1 = nn.Linear(4, 32)
        self.dec2 = nn.Linear(32, d)
        self.last_code = None

    def forward(self, x):
        self.last_code = self.code(torch.relu(self.enc(x)))
        return self.dec2(torch.relu(self.dec1(self.last_code)))


def _patterns(d=12, batch=32, seed=5):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(4, d, generator=g)

    def batch_fn(step):
        gs = torch.Generator().manual_seed(seed * 1000 + step)
        x = centres[torch.randint(0, 4, (batch,), generator=gs)] + 0.2 * torch.randn(batch, d, generator=gs)
        return x, x

    return batch_fn


def ae_code_penalty_sign_flipped():
    """An autoencoder whose L2 penalty on its code is subtracted instead of added
    (``loss = mse - lam * code.pow(2).mean()``): the objective rewards a large code,
    the code layer's output grows first and the decoder, fed by it, explodes later.
    The growth began at ``code``: the modules after it grow only as it does, and
    the one before it (``enc``) does not grow tenfold."""
    def spec(sign):
        def build():
            torch.manual_seed(0)
            model = _CodeAE()
            mse = nn.MSELoss()

            def loss(out, y):
                return mse(out, y) + sign * 0.5 * model.last_code.pow(2).mean()

            return model, torch.optim.Adam(model.parameters(), lr=1e-2), loss, None

        return Spec(f"ae_code_penalty_sign_flipped{'' if sign < 0 else '_fixed'}", build, _patterns(), steps=120)

    def truth(bug, fixed):
        steps, code = bug.series("code", "act_std")
        _, dec = bug.series("dec2", "act_std")
        ok = np.isfinite(code) & np.isfinite(dec)
        grew_code = steps[ok][np.argmax(code[ok] >= 10 * code[ok][0])]
        grew_dec = steps[ok][np.argmax(dec[ok] >= 10 * dec[ok][0])]
        assert code[ok].max() >= 10 * code[ok][0] and grew_code <= grew_dec, (grew_code, grew_dec)
        _, code_f = fixed.series("code", "act_std")
        ok_f = np.isfinite(code_f)
        assert code_f[ok_f].max() < 10 * code_f[ok_f][0]

    return Case(spec(-1.0), ("activation_explosion",), "code", None, fixed=spec(1.0), truth=truth,
                measure_onset=_code_growth_step, tolerance=10)


def _code_growth_step(result):
    """The step at which ``code``'s output first spread beyond the explosion floor
    (an RMS of 100, thresholds.act_explode_floor) after growing a hundredfold over
    its first measurement: its own growth, no module before it grew first."""
    steps, std = result.series("code", "act_std")
    _, mean = result.series("code", "act_mean")
    rms = np.sqrt(mean * mean + std * std)
    ok = np.isfinite(rms)
    big = (rms[ok] > 100) & (std[ok] >= 100 * std[ok][0])
    return int(steps[ok][np.argmax(big)])


# --- healthy: growth that is no explosion ---------------------------------------


class _PreLNBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.f = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        return x + self.f(self.norm(x))


def deep_pre_ln_residual():
    """24 pre-LN residual blocks at PyTorch's default initialisation: the stream grows
    like sqrt(depth) (every block adds an unnormalised branch), which is healthy."""
    def build():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), *[_PreLNBlock(32) for _ in range(24)],
                              nn.LayerNorm(32), nn.Linear(32, 4))
        return model, torch.optim.AdamW(model.parameters(), lr=1e-3), nn.CrossEntropyLoss(), None

    from .failures import _teacher
    return Spec("deep_pre_ln_residual", build, _teacher(), steps=80)


def small_init_code_grows():
    """The autoencoder above with its penalty's right sign and its code layer
    initialised a hundred times too small: the code's output grows by far more than
    tenfold over its first measurement while it learns, and nothing explodes."""
    def build():
        torch.manual_seed(0)
        model = _CodeAE()
        with torch.no_grad():
            model.code.weight.mul_(0.01)
            model.code.bias.mul_(0.01)
        mse = nn.MSELoss()

        def loss(out, y):
            return mse(out, y) + 1e-3 * model.last_code.pow(2).mean()

        return model, torch.optim.Adam(model.parameters(), lr=3e-3), loss, None

    return Spec("small_init_code_grows", build, _patterns(), steps=120)


def all_cases():
    """Every growth failure."""
    return [conv_stack_unit_std_init(), ae_code_penalty_sign_flipped()]


def all_specs():
    """Every healthy growth."""
    return [deep_pre_ln_residual(), small_init_code_grows()]
