"""Session-wide settings: the test device (tests/device.py)."""

import pytest
import torch

from tests.device import DEVICE

if DEVICE.type != "cpu":
    torch.set_default_device(DEVICE)


@pytest.fixture(params=["cpp", "python"])
def gradients_read_in(request, monkeypatch):
    """Run a test with the parameters' gradients read by the C++ reader
    (training/grad_reader.py; skipped where it cannot be built) and again
    read in Python, as before the reader is loaded."""
    from tb_neuraldbg.training import grad_reader

    built = grad_reader.wait(600)  # (a build in flight must not land half-way through the Python run)
    if request.param == "python":
        monkeypatch.setattr(grad_reader, "_module", None)
    elif not built:
        pytest.skip("the C++ gradient reader cannot be built here (no compiler or no torch headers)")
    return request.param
