"""Healthy runs whose large gains a normalisation right after divides away.

A module right before a normalisation layer cannot explode the signal: the
normalisation divides its output's scale away, whatever it is. Weight
standardisation (Qiao et al. 2019; NFNets, BiT) gives a conv of unit-variance
filters a forward gain of about sqrt(fan_in), by design, before its
GroupNorm; a Linear initialised far too large before a LayerNorm only slows
its own learning. Neither is an explosion (``aspects/gain.py``'s
``feeds_bounded``). test_scenarios.py runs both and asserts they are silent.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from . import models as M
from .harness import Spec


class WSConv2d(nn.Conv2d):
    """A conv whose filters are standardised (mean 0, std 1 over each
    filter's fan-in) at every forward."""

    def forward(self, x):
        w = self.weight
        w = (w - w.mean(dim=(1, 2, 3), keepdim=True)) / (w.std(dim=(1, 2, 3), keepdim=True) + 1e-5)
        return F.conv2d(x, w, self.bias, self.stride, self.padding)


def wsconv_groupnorm_classifier(steps=150):
    """Two weight-standardised convs (gain ~sqrt(3 * 9) and ~sqrt(16 * 9),
    i.e. 5 and 12), each before a GroupNorm, on the brighter-quadrant task."""
    def build():
        model = nn.Sequential(WSConv2d(3, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.ReLU(),
                              WSConv2d(16, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(64, 4))
        return model, torch.optim.Adam(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), None

    return Spec("wsconv_groupnorm_classifier", build, M.quadrants(), steps=steps, num_classes=4)


def mlp_large_init_before_layernorm(steps=150):
    """An MLP whose first Linear is initialised 30 times too large, right
    before a LayerNorm: the signal after the norm is at unit scale."""
    def build():
        model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 64), nn.LayerNorm(64), nn.GELU(),
                              nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))
        with torch.no_grad():
            model[1].weight.mul_(30.0)
        return model, torch.optim.AdamW(model.parameters(), lr=2e-3), nn.CrossEntropyLoss(), None

    return Spec("mlp_large_init_before_layernorm", build, M.quadrants(), steps=steps, num_classes=4)


def all_specs():
    """Every healthy run of this module."""
    return [wsconv_groupnorm_classifier(), mlp_large_init_before_layernorm()]
