"""watch(grad_clip=...): what the loop clips to reaches the stored config and the live diagnosis,
and the framework callbacks fill it in from their trainer's settings."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from tb_neuraldbg import DebugWriter
from tb_neuraldbg.offline.reader import read_logdir
from tb_neuraldbg.training.schedule import WatchConfig
from tests.test_writer import fit, tiny


@pytest.mark.parametrize("bad", [True, -1.0, "1.0", float("nan")])
def test_grad_clip_takes_a_number_at_least_0_or_none(bad):
    with pytest.raises(ValueError, match="grad_clip"):
        WatchConfig(grad_clip=bad)
    assert WatchConfig(grad_clip=1).grad_clip == 1.0 and WatchConfig().grad_clip is None


def test_grad_clip_reaches_the_stored_config_and_the_live_engine(tmp_path):
    with DebugWriter(str(tmp_path)) as w:
        fit(w, tiny(), 3, grad_clip=0.5)
        w.flush()
        assert w._worker.engine.grad_clip == 0.5  # (its advice leaves clipping out)
    (run,) = read_logdir(str(tmp_path))
    assert run.config["grad_clip"] == 0.5


def test_the_hugging_face_callback_passes_the_trainers_max_grad_norm(tmp_path):
    pytest.importorskip("transformers")
    from tb_neuraldbg.integrations.transformers import NeuralDbgCallback

    for max_grad_norm, want in ((1.0, 1.0), (0.0, 0.0), (None, 0.0)):
        model = nn.Linear(4, 2)
        cb = NeuralDbgCallback(log_dir=str(tmp_path / f"run{max_grad_norm}"))
        args = SimpleNamespace(max_grad_norm=max_grad_norm, output_dir=str(tmp_path))
        cb.on_train_begin(args, SimpleNamespace(global_step=0), None, model=model,
                          optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
        try:
            assert cb.attachment.handle.instrument.config.grad_clip == want
        finally:
            cb.on_train_end(args, None, None)
