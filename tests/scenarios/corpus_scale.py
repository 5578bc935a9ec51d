"""Scenarios of data scale and of what zero or non-finite values mean: inputs
far below unit scale, regression targets far above it, a tanh RNN pinned at
+-1 by raw inputs, a NaN born in a parent's forward after its last watched
submodule; each with its fixed twin and a truth check, and healthy controls
built to look like them (docs/diagnosis.md: "Which way the inputs are off",
"Targets off unit scale", "Zero gradients of a saturated layer", "Born
between modules").
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from . import models as M
from .failures import Case
from .harness import Spec


def _rms(result, layer, step=0):
    steps, mean = result.series(layer, "act_mean")
    _, std = result.series(layer, "act_std")
    i = int(np.flatnonzero(steps == step)[0])
    return math.sqrt(float(mean[i]) ** 2 + float(std[i]) ** 2)


# --- inputs far below unit scale -------------------------------------------------


def _image_mlp(norm=False):
    layers = [nn.Flatten()]
    if norm:
        layers.append(nn.LayerNorm(144))
    layers += [nn.Linear(144, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)]
    return nn.Sequential(*layers)


def mlp_pixels_scaled_twice():
    """An MLP on flattened 12x12 images whose pixels (0..255) are divided by
    255 twice (a loader that already scaled them, then a ToTensor-like step):
    the inputs are ~1e-4, the first Linear's output is its bias. Source: the
    SOF-VSR issue #14 report of LR tensors normalised twice. Fixed: divided
    once."""
    def spec(bug):
        def build():
            model = _image_mlp()
            return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), nn.CrossEntropyLoss(), None

        scale = 0.25 / 255.0 if bug else 0.25
        return Spec(f"mlp_pixels_scaled_twice{'' if bug else '_fixed'}", build, M.images(scale=scale, batch=32),
                    steps=120, num_classes=4)

    def truth(bug, fixed):
        assert _rms(bug, "<input>") < 1.0 / 30 and abs(_rms(fixed, "<input>") / _rms(bug, "<input>") - 255) < 1
        assert np.mean(bug.losses[-20:]) > 0.9 * math.log(4) > 2 * np.mean(fixed.losses[-20:])

    return Case(spec(True), ("data_anomaly",), "<input>", 0, fixed=spec(False), truth=truth)


def mlp_small_inputs_layernorm():
    """Healthy: the same tiny inputs, normalised by a first LayerNorm."""
    def build():
        model = _image_mlp(norm=True)
        return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), nn.CrossEntropyLoss(), None

    return Spec("mlp_small_inputs_layernorm", build, M.images(scale=0.25 / 255.0, batch=32), steps=120,
                num_classes=4)


# --- regression targets far above unit scale -------------------------------------


def _counts(batch=32, scale=1.0, offset=0.0, seed=3):
    """Images whose target is the brightness of the blob (a count), as
    ``offset + scale * z`` with z ~ unit scale."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(1, 1, 8, 8, generator=g)

    def batch_fn(step):
        gs = torch.Generator().manual_seed(7000 + step)
        x = torch.randn(batch, 1, 8, 8, generator=gs)
        z = torch.tanh((x * w).sum((1, 2, 3)) / 8.0).unsqueeze(1)
        return x, offset + scale * z

    return batch_fn


def _cnn_regressor():
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                         nn.Flatten(), nn.Linear(512, 32), nn.ReLU(), nn.Linear(32, 1))


def cnn_regression_targets_in_thousands():
    """A CNN regressing a count in the thousands (crowd counting in raw
    units) with MSE and SGD: the first loss is ~1e7 and its gradient at the
    output ~1e3 before any update; SGD diverges within a few steps. Source:
    Humbatova et al. ICSE 2020, 'Missing normalisation of the data'. Fixed:
    the targets standardised."""
    def spec(bug):
        def build():
            model = _cnn_regressor()
            return model, torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9), nn.MSELoss(), None

        data = _counts(scale=1500.0, offset=3000.0) if bug else _counts()
        return Spec(f"cnn_regression_targets_in_thousands{'' if bug else '_fixed'}", build, data, steps=60)

    def truth(bug, fixed):
        first = bug.losses[0]
        assert first > 1e6 and not all(v < 1e3 * first for v in bug.losses[:5] if v == v)
        assert np.mean(fixed.losses[-10:]) < np.mean(fixed.losses[:10])

    return Case(spec(True), ("exploding_gradient",), "<loss>", 0, fixed=spec(False), truth=truth)


class _StandardisedMSE(nn.Module):
    """MSE on targets standardised inside the loss (mean and std known)."""

    def __init__(self, mean, std):
        super().__init__()
        self.mean, self.std = mean, std

    def forward(self, pred, y):
        return nn.functional.mse_loss(pred, (y - self.mean) / self.std)


def cnn_targets_standardised_in_loss():
    """Healthy: targets in [0, 1e3], standardised inside the loss."""
    def build():
        model = _cnn_regressor()
        return (model, torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9), _StandardisedMSE(500.0, 400.0),
                None)

    return Spec("cnn_targets_standardised_in_loss", build, _counts(scale=400.0, offset=500.0), steps=60)


# --- a tanh RNN pinned at +-1 by raw inputs --------------------------------------


class _BiTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(2, 16, batch_first=True, bidirectional=True)
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.rnn(x)[0]).transpose(1, 2)


def _audio(batch=16, t=24, scale=1.0, offset=0.0):
    """Two channels of amplitudes (raw 24-bit ADC counts around their DC
    bias: ``offset`` 2e6, ``scale`` 1e4), tagged per frame by which channel
    is louder (3 classes with a tie band)."""
    def batch_fn(step):
        gs = torch.Generator().manual_seed(9000 + step)
        x = torch.randn(batch, t, 2, generator=gs)
        d = x[..., 0].abs() - x[..., 1].abs()
        y = torch.where(d > 0.3, 0, torch.where(d < -0.3, 1, 2))
        return x * scale + offset, y

    return batch_fn


def birnn_tagger_raw_amplitudes():
    """A bidirectional tanh RNN tagging frames of raw 24-bit ADC counts of
    two microphones (~2e6 +- 1e4, DC bias not removed): every hidden unit
    is at +-1 exactly in float32 from the first step, its parameters'
    gradients exactly 0. Source: LeCun et al. 'Efficient BackProp' 1998
    sec. 4.3 (normalise the inputs). Fixed: the amplitudes standardised."""
    def spec(bug):
        def build():
            model = _BiTagger()
            return model, torch.optim.Adam(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), None

        return Spec(f"birnn_tagger_raw_amplitudes{'' if bug else '_fixed'}", build,
                    _audio(scale=1.0e4, offset=2.0e6) if bug else _audio(), steps=80, num_classes=3)

    def truth(bug, fixed):
        assert _rms(bug, "rnn") >= 0.99 and _rms(fixed, "rnn") < 0.9
        _, g = bug.series("rnn", "grad_norm")
        assert (g[np.isfinite(g)] == 0).all()
        _, gf = fixed.series("rnn", "grad_norm")
        assert np.nanmin(gf) > 0

    return Case(spec(True), ("saturated_activation",), "<input>", 0, fixed=spec(False), truth=truth)


def birnn_tagger_standardised():
    """Healthy: the same tagger on standardised amplitudes, at a rate that
    drives some units towards +-1 as it learns."""
    def build():
        model = _BiTagger()
        return model, torch.optim.Adam(model.parameters(), lr=1e-2), nn.CrossEntropyLoss(), None

    return Spec("birnn_tagger_standardised", build, _audio(), steps=80, num_classes=3)


# --- a NaN born after a parent's last watched submodule --------------------------


class _AttnPool(nn.Module):
    """Attention pooling over a bag's instances, masking padding with -inf."""

    def __init__(self, d):
        super().__init__()
        self.score = nn.Linear(d, 1)

    def forward(self, h, mask):
        s = self.score(h).squeeze(-1).masked_fill(~mask, float("-inf"))
        return (torch.softmax(s, 1).unsqueeze(-1) * h).sum(1)


class _MIL(nn.Module):
    def __init__(self, empty_bags):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(6, 16), nn.ReLU())
        self.pool = _AttnPool(16)
        self.head = nn.Linear(16, 2)
        self.empty_bags = empty_bags

    def forward(self, x):
        mask = x.abs().sum(-1) > 0
        if not self.empty_bags:
            mask[:, 0] = True  # every bag keeps at least one instance (padding skipped upstream)
        return self.head(self.pool(self.enc(x), mask))


def _bags(batch=16, n=8):
    def batch_fn(step):
        gs = torch.Generator().manual_seed(11000 + step)
        x = torch.randn(batch, n, 6, generator=gs)
        y = (x[..., 0].max(1).values > 1.0).long()
        x[:, n // 2:] = 0  # padding
        x[0] = 0  # an empty bag: every instance is padding
        return x, y

    return batch_fn


def mil_attention_pool_empty_bag():
    """Multiple-instance learning with attention pooling that masks padded
    instances with -inf: an empty bag's row is all -inf, its softmax 0/0 =
    NaN, born in the pooling module's forward after its only submodule (the
    score Linear). Source: PetarV-/GAT issue #39 (non-edges set to -inf
    before the softmax). Fixed: every bag keeps an instance."""
    def spec(bug):
        def build():
            model = _MIL(empty_bags=bug)
            return model, torch.optim.Adam(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), None

        return Spec(f"mil_attention_pool_empty_bag{'' if bug else '_fixed'}", build, _bags(), steps=30,
                    num_classes=2)

    def truth(bug, fixed):
        _, score = bug.series("pool.score", "act_nonfinite")
        _, head_in = bug.series("head", "in_nonfinite")
        assert score[0] == 0 and head_in[0] > 0
        assert all(v == v for v in fixed.losses)

    return Case(spec(True), ("nonfinite",), "pool", 0, fixed=spec(False), truth=truth)


def all_cases():
    """Every failing scenario of this file."""
    return [mlp_pixels_scaled_twice(), cnn_regression_targets_in_thousands(), birnn_tagger_raw_amplitudes(),
            mil_attention_pool_empty_bag()]


def all_specs():
    """Every healthy control of this file."""
    return [mlp_small_inputs_layernorm(), cnn_targets_standardised_in_loss(), birnn_tagger_standardised()]
