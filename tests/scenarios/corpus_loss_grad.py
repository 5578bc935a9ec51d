"""Scenarios of where a failure starts between the loss and the gradients:
a loss written as a plain function (the writer does not see its value) whose
NaN is the first non-finite value of the run, a cut in the gradient's path
that starts mid-run, a custom backward that multiplies the gradient. Each
bug has its fixed twin and a truth check on the raw statistics; the healthy
runs try to fool the same rules (test_scenarios.py runs both)."""

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


def _stripes(batch=16, size=16):
    """Stripes of one of four orientations (the class) at a random phase, plus
    noise: a task a global average pool keeps (unlike a blob's position)."""
    i = torch.arange(size, dtype=torch.float32)
    yy, xx = torch.meshgrid(i, i, indexing="ij")
    coords = torch.stack([yy, xx, yy + xx, yy - xx])

    def batch_fn(step):
        gs = torch.Generator().manual_seed(7000 + step)
        y = torch.randint(0, 4, (batch,), generator=gs)
        phase = torch.rand(batch, 1, 1, generator=gs) * 2 * math.pi
        x = torch.sin(coords[y] * 1.2 + phase) + 0.5 * torch.randn(batch, size, size, generator=gs)
        return x.unsqueeze(1), y

    return batch_fn


class _GlobalAvgPoolFn(torch.autograd.Function):
    """A hand-written global average pool; ``fixed`` False: its backward
    forgets to divide by H*W (the bug)."""

    @staticmethod
    def forward(ctx, x, fixed):
        ctx.shape, ctx.fixed = x.shape, fixed
        return x.mean((-2, -1))

    @staticmethod
    def backward(ctx, g):
        h, w = ctx.shape[-2:]
        g = g[..., None, None].expand(ctx.shape)
        return (g / (h * w) if ctx.fixed else g), None


class _GlobalAvgPool(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed

    def forward(self, x):
        return _GlobalAvgPoolFn.apply(x, self.fixed)


class _GapCNN(nn.Module):
    def __init__(self, fixed):
        super().__init__()
        self.conv1, self.act1 = nn.Conv2d(1, 16, 3, padding=1), nn.ReLU()
        self.conv2, self.act2 = nn.Conv2d(16, 32, 3, padding=1), nn.ReLU()
        self.gap, self.fc = _GlobalAvgPool(fixed), nn.Linear(32, 4)

    def forward(self, x):
        return self.fc(self.gap(self.act2(self.conv2(self.act1(self.conv1(x))))))


def cnn_custom_gap_backward_forgets_mean():
    """A CNN image classifier with a hand-written global average pool
    (``autograd.Function``) whose backward forgets 1/(H*W) (x256 on 16x16
    maps): every gradient below it is 256 times too large, and SGD blows
    the convolutions up after a few tens of steps. The pool's backward gain
    is 256 times a mean's from the first step, before any update: the root
    is the pool. Reports: pytorch/pytorch#4714 (a custom backward),
    "Extending torch.autograd" (check it with gradcheck)."""
    def spec(fixed):
        def build():
            model = _GapCNN(fixed)
            return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), nn.CrossEntropyLoss(), None

        return Spec(f"cnn_custom_gap_backward{'_fixed' if fixed else ''}", build, _stripes(), steps=80)

    def truth(bug, fixed):
        g = {name: (bug.series(name, "grad_norm")[1][0], fixed.series(name, "grad_norm")[1][0])
             for name in ("conv2", "fc")}
        assert 200 < g["conv2"][0] / g["conv2"][1] < 300 and abs(g["fc"][0] / g["fc"][1] - 1) < 1e-5
        assert max(bug.losses) > 100 * max(fixed.losses[20:]) and _loss_fell(fixed)

    return Case(spec(False), ("exploding_gradient",), "gap", 0, fixed=spec(True), truth=truth)


class _GRUTagger(nn.Module):
    """Embedding -> GRU -> last hidden state -> Linear (K logits).
    ``softmax_out``: an nn.Softmax after the head whose output is returned
    (the bug before CrossEntropyLoss); ``keep_probs``: the same Softmax, its
    output kept for the metrics while the logits are returned (healthy)."""

    def __init__(self, softmax_out=False, keep_probs=False, vocab=200, k=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, 16)
        self.gru = nn.GRU(16, 32, batch_first=True)
        self.head = nn.Linear(32, k)
        self.softmax = nn.Softmax(dim=1) if softmax_out or keep_probs else None
        self.softmax_out, self.probs = softmax_out, None

    def forward(self, x):
        _, h = self.gru(self.emb(x))
        logits = self.head(h[-1])
        if self.softmax is None:
            return logits
        probs = self.softmax(logits)
        if self.softmax_out:
            return probs
        self.probs = probs.detach()
        return logits


def gru_softmax_before_cross_entropy():
    """A GRU tagger whose model ends in nn.Softmax, trained with
    CrossEntropyLoss (log-softmax again): the loss cannot fall below
    ln(1 + 3/e) = 0.74 for 4 classes, far above its twin's. What the loss is
    fed is a probability distribution from the first step: the root is
    ``<loss>``. Reports: Humbatova et al. ICSE 2020 (redundant softmax),
    ariecattan/SciCo#2."""
    def spec(bug):
        def build():
            model = _GRUTagger(softmax_out=bug)
            return model, torch.optim.Adam(model.parameters(), lr=1e-2), nn.CrossEntropyLoss(), None

        return Spec(f"gru_softmax_before_cross_entropy{'' if bug else '_fixed'}", build, M.bags(vocab=200), steps=200)

    def truth(bug, fixed):
        floor = math.log1p(3 / math.e)
        assert min(bug.losses) > floor and np.mean(fixed.losses[-20:]) < 0.5 * floor
        _, mean = bug.series("softmax", "act_mean")
        assert np.allclose(mean[np.isfinite(mean)], 0.25, rtol=1e-4)

    return Case(spec(True), ("loss_plateau",), "<loss>", 0, fixed=spec(False), truth=truth)


def all_cases():
    """Every failing scenario of this module."""
    return [bag_function_bce_log_zero(), bag_embedding_detached_mid_run(), cnn_custom_gap_backward_forgets_mean(),
            gru_softmax_before_cross_entropy()]


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


def cnn_gap_gains_rise_while_learning():
    """Healthy: the same CNN with a correct hand-written global average pool
    (its backward gain a mean's, 1/16), trained by SGD with momentum until
    its convolutions' gains grow: the network's gains move away from their
    first median as it learns, and none departs from the others."""
    def build():
        model = _GapCNN(True)
        return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), nn.CrossEntropyLoss(), None

    return Spec("cnn_gap_gains_rise_while_learning", build, _stripes(), steps=150)


def gru_keeps_softmax_probs_for_metrics():
    """Healthy: the same GRU tagger computes its softmax probabilities (its
    last module, for the metrics) but returns the logits to the loss: the
    probabilities are off the loss's gradient path."""
    def build():
        model = _GRUTagger(keep_probs=True)
        return model, torch.optim.Adam(model.parameters(), lr=1e-2), nn.CrossEntropyLoss(), None

    return Spec("gru_keeps_softmax_probs_for_metrics", build, M.bags(vocab=200), steps=150, num_classes=4)


def all_specs():
    """Every healthy run of this module."""
    return [bag_function_loss_confident(), mixer_aux_head_every_fifth_step(), cnn_gap_gains_rise_while_learning(),
            gru_keeps_softmax_probs_for_metrics()]
