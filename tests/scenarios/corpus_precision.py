"""Scenarios of the weights' precision: updates the weights cannot hold.

A model whose weights are kept in bfloat16 (``model.to(torch.bfloat16)``,
no float32 master copy) trained by plain SGD: most updates lr * grad are
below half the spacing of the weight they add to and round away, so most of
the weights never change and the loss falls far less than its float32
twin's. The healthy runs try to fool the rule (``aspects/rounding.py``): the
same network in float32 under bfloat16 autocast (mixed precision: float32
weights), in bfloat16 at a rate whose updates mostly hold, a float32 model
at a fine-tuning rate (updates of 1e-4 of the weights, which float32
holds), and a bfloat16 embedding model under plain SGD whose gradient is
zero on every row not in the batch. test_scenarios.py runs both.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .failures import Case
from .harness import Spec
from .models import bags, images


class _ConvNet(nn.Module):
    """Conv2d -> ReLU -> Conv2d (stride 2) -> ReLU -> Linear (4 classes,
    where the blob is), its parameters in ``dtype``: the batch is cast to it, the
    logits back to float32 for the loss."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.act2 = nn.ReLU()
        self.head = nn.Linear(32 * 6 * 6, 4)
        self.dtype = dtype
        self.to(dtype)

    def forward(self, x):
        h = self.act2(self.conv2(self.act1(self.conv1(x.to(self.dtype)))))
        return self.head(h.flatten(1)).float()


def conv_bf16_weights_sgd_updates_rounded_away():
    """A small conv classifier whose weights are in bfloat16 without a
    float32 master copy, under plain SGD at lr 0.003: lr * grad is below half
    a bfloat16 ulp of most weights (2^-9 of the weight), the step leaves them
    exactly unchanged, and the loss falls far slower than the float32
    twin's. The fix goes to the optimizer's side (a master copy, autocast):
    the root is ``<optimizer>`` from the first update. Reports: Micikevicius
    et al. ICLR 2018 sec. 3.1; Zamirai et al. arXiv:2010.06192 sec. 3."""
    def spec(bug):
        def build():
            model = _ConvNet(torch.bfloat16 if bug else torch.float32)
            return model, torch.optim.SGD(model.parameters(), lr=0.003), nn.CrossEntropyLoss(), None

        return Spec(f"conv_bf16_weights_sgd_updates_rounded_away{'' if bug else '_fixed'}", build, images(),
                    steps=200, num_classes=4)

    def truth(bug, fixed):
        # most updated elements of the convolutions did not change at all in
        # bf16, next to none in float32; and the loss fell less
        for layer in ("conv1", "conv2"):
            _, lost = bug.series(layer, "update_lost_frac")
            _, lost_fixed = fixed.series(layer, "update_lost_frac")
            assert np.nanmedian(lost) > 0.5 and np.nanmax(lost_fixed) < 0.05, (layer, lost, lost_fixed)
        assert np.mean(bug.losses[-20:]) > 1.5 * np.mean(fixed.losses[-20:]), (bug.losses[-5:], fixed.losses[-5:])

    return Case(spec(True), ("frozen_weights",), "<optimizer>", 0, tolerance=10, fixed=spec(False), truth=truth)


def conv_bf16_autocast_fp32_weights():
    """Healthy: the same network and rate, its forward under bfloat16
    autocast (mixed precision): the weights stay in float32 and hold every
    update."""
    def build():
        model = _ConvNet()
        return model, torch.optim.SGD(model.parameters(), lr=0.01), nn.CrossEntropyLoss(), None

    return Spec("conv_bf16_autocast_fp32_weights", build, images(), steps=150, num_classes=4,
                autocast=torch.bfloat16)


def conv_bf16_weights_updates_that_hold():
    """Healthy: the same network with its weights in bfloat16 under plain
    SGD at lr 0.1: most updates are above half an ulp of their weight and
    change it (a minority rounds away), and it learns as its float32 twin."""
    def build():
        model = _ConvNet(torch.bfloat16)
        return model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), None

    return Spec("conv_bf16_weights_updates_that_hold", build, images(), steps=150, num_classes=4)


def conv_fp32_fine_tuning_rate():
    """Healthy: the same network in float32 trained by Adam at a
    fine-tuning rate, lr 1e-4 (updates of about 1e-4 of a weight per step,
    far below what bfloat16 holds: float32 resolves 6e-8 of it)."""
    def build():
        model = _ConvNet()
        return model, torch.optim.Adam(model.parameters(), lr=1e-4), nn.CrossEntropyLoss(), None

    return Spec("conv_fp32_fine_tuning_rate", build, images(), steps=150, num_classes=4)


_VOCAB = 400


class _BagClassifier(nn.Module):
    """EmbeddingBag (mean) -> Linear, in bfloat16; the logits to float32."""

    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(_VOCAB, 32, mode="mean")
        self.fc = nn.Linear(32, 4)
        self.to(torch.bfloat16)

    def forward(self, x):
        return self.fc(self.emb(x)).float()


def embedding_bag_bf16_sparse_rows_sgd():
    """Healthy: an EmbeddingBag classifier in bfloat16 under plain SGD at a
    rate whose updates hold: at each step about four fifths of the
    embedding's elements get an exactly zero gradient and do not move (no
    update rounded away: there was none); of the others, a minority rounds
    away."""
    def build():
        model = _BagClassifier()
        return model, torch.optim.SGD(model.parameters(), lr=5.0), nn.CrossEntropyLoss(), None

    # (a batch holds under 100 distinct ids of the 400: most rows get a zero gradient)
    return Spec("embedding_bag_bf16_sparse_rows_sgd", build, bags(vocab=_VOCAB), steps=150, num_classes=4)


def all_cases():
    """Every failing scenario of this module."""
    return [conv_bf16_weights_sgd_updates_rounded_away()]


def all_specs():
    """Every healthy run of this module."""
    return [conv_bf16_autocast_fp32_weights(), conv_bf16_weights_updates_that_hold(), conv_fp32_fine_tuning_rate(),
            embedding_bag_bf16_sparse_rows_sgd()]
