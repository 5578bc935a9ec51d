"""The Lightning callback on tiny models (CPU): one run with Lightning's own
scalars, the true whole-step loss (accumulation, fp16 scaling), the
precision plugin's scaler, validation not recorded, a LightningModule with
``self.crit`` reported healthy, closing on exceptions; both namespaces."""

import glob
import importlib
import os

import numpy as np
import pytest
import torch
from torch import nn

from tb_neuraldbg import metadata
from tb_neuraldbg.offline.reader import read_logdir, read_run

pytest.importorskip("lightning")
torch.set_num_threads(1)
M = metadata.METRIC_INDEX
NAMESPACES = [n for n in ("lightning.pytorch", "pytorch_lightning") if importlib.util.find_spec(n.split(".")[0])]


def make_module(L, grads=None, fail_at=None):
    class Classifier(L.LightningModule):
        """The common style: the loss module is an attribute."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
            self.crit = nn.CrossEntropyLoss()
            self.losses = []  # every micro-batch's loss, as training_step computed it

        def training_step(self, batch, batch_idx):
            x, y = batch
            if fail_at is not None and self.global_step == fail_at:
                raise RuntimeError("boom")
            loss = self.crit(self.net(x), y)
            self.losses.append(loss.detach().item())
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", self.crit(self.net(x), y))

        def on_before_optimizer_step(self, optimizer):
            if grads is not None:  # unscaled here (Lightning unscales before this hook), not yet clipped
                grads.append({n: p.grad.norm().item() for n, p in self.named_parameters() if p.grad is not None})

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    return Classifier()


def data(n=64, batch=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    ds = torch.utils.data.TensorDataset(x, y)
    return torch.utils.data.DataLoader(ds, batch_size=batch)


def trainer_for(L, root, watch=None, **kw):
    from tb_neuraldbg.integrations.lightning import NeuralDbgCallback

    cb = NeuralDbgCallback(**(watch or {}))
    loggers = importlib.import_module(L.__name__ + ".loggers")
    kw.setdefault("max_epochs", 3)
    t = L.Trainer(
        default_root_dir=str(root),
        logger=loggers.TensorBoardLogger(str(root), name="exp"),
        callbacks=[cb],
        accelerator="cpu",
        devices=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kw,
    )
    return t, cb


@pytest.mark.parametrize("analysis", ["thread", pytest.param("process", marks=[pytest.mark.slow, pytest.mark.skipif(
    os.name != "posix", reason="the worker process needs a POSIX system")])])
@pytest.mark.parametrize("ns", NAMESPACES)
def test_a_healthy_module_with_self_crit_is_one_healthy_run_beside_lightnings_scalars(tmp_path, ns, analysis):
    L = importlib.import_module(ns)
    model = make_module(L)
    t, cb = trainer_for(L, tmp_path, watch={"analysis": analysis}, log_every_n_steps=1)
    t.fit(model, data(), data(16, seed=1))
    assert cb.writer is None  # closed at fit end
    runs = read_logdir(str(tmp_path))
    assert [r.name for r in runs] == ["exp/version_0"]
    run = runs[0]
    assert "crit" not in run.layer_names and {"net.0", "net.2"} <= set(run.layer_names)
    assert run.num_steps == t.global_step == 24  # validation steps are not training steps
    assert run.diagnosis["status"] == "healthy", run.events
    assert run.config["analysis"] == analysis
    # Lightning's own scalars are in the same run directory.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(run.path)
    ea.Reload()
    assert "train_loss" in ea.Tags()["scalars"] and "val_loss" in ea.Tags()["scalars"]
    loss = run.stats[:, run.layer_names.index(metadata.PSEUDO_LOSS), M["value"]]
    np.testing.assert_allclose(loss, model.losses, rtol=1e-5)


def test_accumulation_and_fp16_scaling_give_the_true_whole_step_loss_and_grads(tmp_path):
    import lightning.pytorch as L
    from lightning.pytorch.plugins.precision import MixedPrecision

    grads = []
    model = make_module(L, grads=grads)
    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=2.0**16))
    t, cb = trainer_for(L, tmp_path, max_epochs=1, accumulate_grad_batches=2, plugins=[plugin])
    t.fit(model, data())
    run = read_run(glob.glob(str(tmp_path / "exp" / "version_0"))[0])
    assert run.num_steps == 4 == len(grads)
    loss = run.stats[:, run.layer_names.index(metadata.PSEUDO_LOSS), M["value"]]
    per_step = np.asarray(model.losses).reshape(4, 2).mean(axis=1)
    np.testing.assert_allclose(loss, per_step, rtol=1e-3)
    # Gradient norms unscaled: those Lightning hands the optimizer.
    row = run.layer_names.index("net.0")
    want = [np.hypot(g["net.0.weight"], g["net.0.bias"]) for g in grads]
    np.testing.assert_allclose(run.stats[:, row, M["grad_norm"]], want, rtol=1e-3)
    assert run.config["scaler"] is True
    scale = run.stats[:, run.layer_names.index(metadata.PSEUDO_OPTIMIZER), M["scale"]]
    assert np.isfinite(scale).all()


def test_bf16_mixed_and_gradient_clipping(tmp_path):
    import lightning.pytorch as L

    grads = []
    model = make_module(L, grads=grads)
    t, cb = trainer_for(L, tmp_path, max_epochs=1, precision="bf16-mixed", gradient_clip_val=0.01)
    t.fit(model, data())
    run = read_run(str(tmp_path / "exp" / "version_0"))
    assert run.num_steps == 8 and run.config["scaler"] is False
    row = run.layer_names.index("net.2")
    ours = run.stats[:, row, M["grad_norm"]]
    want = [np.hypot(g["net.2.weight"], g["net.2.bias"]) for g in grads]
    np.testing.assert_allclose(ours, want, rtol=1e-2)  # before clipping
    assert (ours > 0.01).all()


def test_an_exception_in_training_closes_the_writer_with_its_data(tmp_path):
    import lightning.pytorch as L

    model = make_module(L, fail_at=5)
    t, cb = trainer_for(L, tmp_path, max_epochs=1)
    with pytest.raises(RuntimeError, match="boom"):
        t.fit(model, data())
    assert cb.writer is None
    assert read_run(str(tmp_path / "exp" / "version_0")).num_steps == 5


def test_without_a_tensorboard_logger_the_run_goes_under_default_root_dir(tmp_path):
    import lightning.pytorch as L
    from tb_neuraldbg.integrations.lightning import NeuralDbgCallback

    t = L.Trainer(
        default_root_dir=str(tmp_path), logger=False, callbacks=[NeuralDbgCallback(stats_every=2)], max_steps=3,
        accelerator="cpu", enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )
    t.fit(make_module(L), data())
    run = read_run(os.path.join(str(tmp_path), "neuraldbg"))
    assert run.num_steps == 3 and run.config["stats_every"] == 2
