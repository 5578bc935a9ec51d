"""Scenarios of where a failure starts between the loss and the gradients:
a loss written as a plain function (the writer does not see its value) whose
NaN is the first non-finite value of the run. Each bug has its fixed twin
and a truth check on the raw statistics; the healthy runs try to fool the
same rules (test_scenarios.py runs both)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from . import models as M
from .corpus_failures import _first_nonfinite, _loss_fell
from .failures import Case
from .harness import Spec


def _hand_multilabel_bce(z, y):
    """Multi-label BCE by hand on sigmoid probabilities: once a logit passes
    ~17, sigmoid rounds to exactly 1.0 in float32 and ``0 * log(1 - 1)`` is
    NaN."""
    p = torch.sigmoid(z)
    t = F.one_hot(y, z.shape[1]).float()
    return -(t * torch.log(p) + (1 - t) * torch.log(1 - p)).sum(1).mean()


def _logits_multilabel_bce(z, y):
    """The same loss on the logits (log-sum-exp inside): finite however confident."""
    t = F.one_hot(y, z.shape[1]).float()
    return F.binary_cross_entropy_with_logits(z, t, reduction="none").sum(1).mean()


def _bag_spec(name, loss, steps):
    def build():
        model = M.BagClassifier()
        return model, torch.optim.Adam(model.parameters(), lr=0.05), loss, None

    return Spec(name, build, M.bags(), steps=steps)


def bag_function_bce_log_zero():
    """An EmbeddingBag tagger trained with a hand-written multi-label BCE,
    passed as a plain function (not an ``nn.Module``, so the writer records
    no loss value): once confident, sigmoid rounds to 1.0 and the loss is
    NaN; every module's output is still finite at that step, the gradient
    entering the model's output is the first non-finite value. The root is
    ``<loss>``, not the output layer that received it. Reports:
    tiny-dnn/tiny-dnn#410, allenai/allennlp#2797 (softmax giving absolute 0)."""
    def onset(bug):
        first = next(i for i, v in enumerate(bug.losses) if not math.isfinite(v))
        return first

    def truth(bug, fixed):
        first = onset(bug)
        assert first > 10  # born once the network is confident, not at its init
        fwd_step, _ = _first_nonfinite(bug)
        assert fwd_step is None or fwd_step > first  # every module's output finite at that step
        assert all(math.isfinite(v) for v in fixed.losses) and _loss_fell(fixed)

    return Case(_bag_spec("bag_function_bce_log_zero", _hand_multilabel_bce, 60), ("nonfinite",), "<loss>", None,
                fixed=_bag_spec("bag_function_bce_log_zero_fixed", _logits_multilabel_bce, 60), truth=truth,
                measure_onset=onset)


class _CachedEmbeddingBag(M.BagClassifier):
    """``cache``: the embeddings are treated as a fixed feature cache
    (``.detach()``), an optimisation meant for evaluation."""

    cache = False

    def forward(self, x):
        e = self.emb(x)
        return self.out(self.act(self.fc(e.detach() if self.cache else e)))


def bag_embedding_detached_mid_run(at=40):
    """An EmbeddingBag classifier whose loop turns on an embedding cache
    (``.detach()`` of the embeddings) at step ``at``, meant for evaluation
    only: the embeddings, still in the optimizer, get no gradient from then
    on. A cut that starts mid-run is ``no_gradient`` from its first step.
    Reports: pytorch/pytorch#3000-style "loss.backward() does not update the
    embedding" threads; Humbatova et al. ICSE 2020 (missing gradient flow)."""
    def spec(bug):
        def build():
            model = _CachedEmbeddingBag()
            return model, torch.optim.Adam(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), None

        def plant(step, model, opt):
            model.cache = bug and step >= at

        return Spec(f"bag_embedding_detached_mid_run{'' if bug else '_fixed'}", build, M.bags(), steps=90,
                    plant=plant)

    def truth(bug, fixed):
        steps, missing = bug.series("emb", "grad_missing")
        assert int(steps[np.flatnonzero(missing > 0)[0]]) == at and (missing[steps >= at] > 0).all()
        assert not (fixed.series("emb", "grad_missing")[1] > 0).any()

    return Case(spec(True), ("no_gradient",), "emb", at, fixed=spec(False), truth=truth)


def all_cases():
    """Every failing scenario of this module."""
    return [bag_function_bce_log_zero(), bag_embedding_detached_mid_run()]


def bag_function_loss_confident():
    """Healthy: the same tagger at the same rate with the loss on the logits,
    a plain function too: logits far past sigmoid's float32 range, every
    value finite."""
    return _bag_spec("bag_function_loss_confident", _logits_multilabel_bce, 150)


class _MixerWithAux(M.Mixer):
    """A Mixer with an auxiliary head that predicts the image's mean."""

    def __init__(self):
        super().__init__()
        self.aux = nn.Linear(16, 1)

    def forward(self, x):
        h = self.norm(self.blocks(self.patch(x).flatten(2).transpose(1, 2))).mean(1)
        return self.head(h), self.aux(h)


def _aux_every(period, first):
    """CrossEntropy on the main head, plus the auxiliary regression only on
    every ``period``-th step from ``first`` on (the loop counts its calls)."""
    calls = [0]

    def loss(out, y):
        logits, aux = out
        main = F.cross_entropy(logits, y)
        k, calls[0] = calls[0], calls[0] + 1
        if k >= first and (k - first) % period == 0:
            main = main + 0.3 * F.mse_loss(aux.squeeze(1), logits.detach().mean(1))
        return main

    return loss


def mixer_aux_head_every_fifth_step():
    """Healthy: a Mixer whose auxiliary head is trained on every 5th step,
    from the third: its parameters have no ``.grad`` on four steps out of
    five, and on the first two (GoogLeNet's optional auxiliary
    classifiers)."""
    def build():
        model = _MixerWithAux()
        return model, torch.optim.Adam(model.parameters(), lr=3e-3), _aux_every(5, 2), None

    return Spec("mixer_aux_head_every_fifth_step", build, M.quadrants(), steps=150)


def all_specs():
    """Every healthy run of this module."""
    return [bag_function_loss_confident(), mixer_aux_head_every_fifth_step()]
