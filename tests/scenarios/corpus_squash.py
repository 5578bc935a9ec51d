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


def all_cases():
    """Every failing scenario of this module."""
    return [tagger_sigmoid_before_soft_margin_loss()]


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


def all_specs():
    """Every healthy run of this module."""
    return [tagger_sigmoid_with_bce_loss(), tagger_keeps_sigmoid_probs_for_metrics()]
