"""Session-wide settings: the test device (tests/device.py)."""

import torch

from tests.device import DEVICE

if DEVICE.type != "cpu":
    torch.set_default_device(DEVICE)

