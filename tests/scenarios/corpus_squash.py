"""Scenarios of the interface between the model's output and the loss: an
output already squashed into [0, 1] fed to a criterion that squashes it
again (a Sigmoid before MultiLabelSoftMarginLoss), whose loss has a floor
it cannot go below. Each bug has its fixed twin and a truth check on the raw
statistics; the healthy runs try to fool the same rule (the right pairing,
Sigmoid with BCELoss; a sigmoid kept for the metrics, off the gradient
path). test_scenarios.py runs both."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from .failures import Case
from .harness import Spec

_VOCAB, _K = 400, 5


def _tags(batch=32, bag=12):
    """Bags of tokens drawn from one to three of ``_K`` topics (each topic
    its share of the vocabulary); the targets are the multi-hot topics."""
    share = _VOCAB // _K

    def batch_fn(step):
        gs = torch.Generator().manual_seed(31_000 + step)
        y = (torch.rand(batch, _K, generator=gs) < 0.3).float()
        y[torch.arange(batch), torch.randint(0, _K, (batch,), generator=gs)] = 1.0
        topic = torch.multinomial(y, bag, replacement=True, generator=gs)
        x = topic * share + torch.randint(0, share, (batch, bag), generator=gs)
        return x, y

    return batch_fn


class _Tagger(nn.Module):
    """EmbeddingBag -> Linear -> ReLU -> Linear (K logits); ``sigmoid``:
    "out" (an nn.Sigmoid as the last layer, its output to the loss),
    "metrics" (the probabilities kept for the metrics, the logits to the
    loss) or None."""

    def __init__(self, sigmoid=None):
        super().__init__()
        self.emb = nn.EmbeddingBag(_VOCAB, 32, mode="mean")
        self.fc = nn.Linear(32, 64)
        self.act = nn.ReLU()
        self.head = nn.Linear(64, _K)
        self.squash = nn.Sigmoid() if sigmoid else None
        self.mode, self.probs = sigmoid, None

    def forward(self, x):
        logits = self.head(self.act(self.fc(self.emb(x))))
        if self.squash is None:
            return logits
        probs = self.squash(logits)
        if self.mode == "out":
            return probs
        self.probs = probs.detach()
        return logits


def tagger_sigmoid_before_soft_margin_loss():
    """A multi-label topic tagger whose model ends in nn.Sigmoid, trained
    with MultiLabelSoftMarginLoss (log-sigmoid again): every prediction stays
    in [0.5, 0.73] and the loss cannot fall below ln(1 + 1/e) = 0.313, far
    above its twin's. What the loss is fed is squashed from the first step:
    the root is ``<loss>``. Reports: yudi-mars/daisyRec#15 (the same bug
    with BCEWithLogitsLoss)."""
    def spec(bug):
        def build():
            model = _Tagger("out" if bug else None)
            return model, torch.optim.Adam(model.parameters(), lr=1e-2), nn.MultiLabelSoftMarginLoss(), None

        return Spec(f"tagger_sigmoid_before_soft_margin_loss{'' if bug else '_fixed'}", build, _tags(), steps=200)

    def truth(bug, fixed):
        floor = math.log1p(1 / math.e)
        assert min(bug.losses) > floor and np.mean(fixed.losses[-20:]) < 0.75 * floor
        _, top = bug.series("squash", "act_absmax")
        assert np.all(top[np.isfinite(top)] <= 1.0)

    return Case(spec(True), ("loss_plateau",), "<loss>", 0, fixed=spec(False), truth=truth)


def tagger_sigmoid_with_bce_loss():
    """Healthy: the same tagger ends in nn.Sigmoid and is trained with
    BCELoss, which takes probabilities (the right pairing): outputs in
    [0, 1] on the gradient path, but no squashing again."""
    def build():
        model = _Tagger("out")
        return model, torch.optim.Adam(model.parameters(), lr=1e-2), nn.BCELoss(), None

    return Spec("tagger_sigmoid_with_bce_loss", build, _tags(), steps=150)


def tagger_keeps_sigmoid_probs_for_metrics():
    """Healthy: the same tagger computes its sigmoid probabilities (its last
    module, for the metrics) but gives the logits to BCEWithLogitsLoss: the
    probabilities are off the loss's gradient path."""
    def build():
        model = _Tagger("metrics")
        return model, torch.optim.Adam(model.parameters(), lr=1e-2), nn.BCEWithLogitsLoss(), None

    return Spec("tagger_keeps_sigmoid_probs_for_metrics", build, _tags(), steps=150)


# -------------------------------------------- an output that cannot reach its targets


def _waves(batch=32, length=32, counts=False, unit=False):
    """1-D signals (a noisy sine of random frequency and phase) and a scalar
    target: the standardised amplitude (half negative), with ``counts`` a
    Poisson count whose rate grows with it (non-negative), with ``unit`` the
    amplitude squashed into [0, 1]."""
    t = torch.linspace(0, 1, length)

    def batch_fn(step):
        gs = torch.Generator().manual_seed(41_000 + step)
        amp = torch.randn(batch, 1, generator=gs)
        freq = 2.0 + 4.0 * torch.rand(batch, 1, generator=gs)
        phase = 6.28 * torch.rand(batch, 1, generator=gs)
        x = (1.0 + 0.5 * amp) * torch.sin(6.28 * freq * t + phase) + 0.1 * torch.randn(batch, length, generator=gs)
        if counts:
            y = torch.poisson(torch.exp(0.8 * amp), generator=gs)
        elif unit:
            y = torch.sigmoid(amp)
        else:
            y = amp
        return x.unsqueeze(1), y

    return batch_fn


def _conv_regressor(out_act):
    """Conv1d x2 -> global max pool -> Linear (one output) -> ``out_act``."""
    model = nn.Sequential()
    for name, m in (("conv1", nn.Conv1d(1, 16, 5, padding=2)), ("act1", nn.ReLU()),
                    ("conv2", nn.Conv1d(16, 16, 5, padding=2)), ("act2", nn.ReLU()),
                    ("pool", nn.AdaptiveMaxPool1d(1)), ("flat", nn.Flatten()), ("out", nn.Linear(16, 1))):
        model.add_module(name, m)
    if out_act is not None:
        model.add_module("out_act", out_act)
    return model


def conv_softplus_output_on_standardised_targets():
    """A 1-D conv regressor whose output goes through nn.Softplus (a
    "positive output" head) although its targets are standardised: every
    negative target is out of reach, and the MSE cannot fall below their
    negative part's mean square. The root is ``<loss>`` from the first step.
    Reports: Humbatova et al. ICSE 2020 (wrong activation of the last
    layer); https://stats.stackexchange.com/questions/362588."""
    def spec(bug):
        def build():
            model = _conv_regressor(nn.Softplus() if bug else None)
            return model, torch.optim.Adam(model.parameters(), lr=3e-3), nn.MSELoss(), None

        return Spec(f"conv_softplus_output_on_standardised_targets{'' if bug else '_fixed'}", build, _waves(),
                    steps=200)

    def truth(bug, fixed):
        data = _waves()
        floors = [float(torch.clamp(data(s)[1], max=0).square().mean()) for s in range(len(bug.losses))]
        assert all(v >= f for v, f in zip(bug.losses, floors))
        assert np.mean(bug.losses[-30:]) > 3 * np.mean(fixed.losses[-30:])
        _, lo = bug.series("<loss>", "target_min")
        assert np.all(lo[np.isfinite(lo)] < 0)

    return Case(spec(True), ("loss_plateau",), "<loss>", 0, fixed=spec(False), truth=truth)


def conv_relu_output_on_counts():
    """Healthy: the same regressor with a ReLU output on Poisson counts
    (non-negative targets, many of them 0): the output's bound is the
    targets' own."""
    def build():
        model = _conv_regressor(nn.ReLU())
        return model, torch.optim.Adam(model.parameters(), lr=3e-3), nn.MSELoss(), None

    return Spec("conv_relu_output_on_counts", build, _waves(counts=True), steps=150)


def conv_sigmoid_output_on_unit_targets():
    """Healthy: the same regressor with a Sigmoid output on targets in
    (0, 1), under MSELoss: the targets lie inside the output's range."""
    def build():
        model = _conv_regressor(nn.Sigmoid())
        return model, torch.optim.Adam(model.parameters(), lr=3e-3), nn.MSELoss(), None

    return Spec("conv_sigmoid_output_on_unit_targets", build, _waves(unit=True), steps=150)


def all_cases():
    """Every failing scenario of this module."""
    return [tagger_sigmoid_before_soft_margin_loss(), conv_softplus_output_on_standardised_targets()]


def all_specs():
    """Every healthy run of this module."""
    return [tagger_sigmoid_with_bce_loss(), tagger_keeps_sigmoid_probs_for_metrics(), conv_relu_output_on_counts(),
            conv_sigmoid_output_on_unit_targets()]
