"""Planted faults shared by the tests: ops that make a NaN/inf where a test
needs one to be born.

    from tests.faults import InfBackward, InfBackwardOp

(tests/scenarios/failures.py keeps its own switchable variant.)
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["InfBackwardOp", "InfBackward"]


class InfBackwardOp(torch.autograd.Function):
    """Identity in forward; backward multiplies the gradient by inf, so a
    non-finite value is born in backward while the forward stays finite."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * math.inf


class InfBackward(nn.Module):
    """InfBackwardOp as a module (a layer of its own in the model)."""

    def forward(self, x):
        return InfBackwardOp.apply(x)
