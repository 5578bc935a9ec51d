"""The device the writer's tests run on.

``TB_NEURALDBG_TEST_DEVICE`` (default ``cpu``; ``benchmarks/gpu_check.sh``
sets ``cuda``) becomes torch's default device for the session (see
conftest.py), so the models and tensors the tests make land there; what a
test draws from a seeded CPU generator goes through :func:`to_device`.
"""

from __future__ import annotations

import os

import torch

__all__ = ["DEVICE", "to_device"]

DEVICE = torch.device(os.environ.get("TB_NEURALDBG_TEST_DEVICE", "cpu"))


def to_device(t: torch.Tensor) -> torch.Tensor:
    """A tensor made on the CPU (a seeded ``torch.Generator``), on DEVICE."""
    return t.to(DEVICE)
