"""Lightning: ``Trainer(callbacks=[NeuralDbgCallback()])``.

    from tb_neuraldbg.integrations.lightning import NeuralDbgCallback
    trainer = lightning.Trainer(callbacks=[NeuralDbgCallback()], ...)

One class serves both namespaces (``lightning.pytorch`` and the separate
``pytorch_lightning`` package): it subclasses the ``Callback`` of each one
installed. What it does, hook by hook:

* ``on_fit_start`` (the optimizers exist then, ``setup`` is too early):
  opens a DebugWriter in the TensorBoardLogger's run directory when there
  is one (one run in TensorBoard with Lightning's own scalars; else
  ``<default_root_dir>/neuraldbg``) and watches the LightningModule with the
  first optimizer and the precision plugin's GradScaler (16-mixed), steps
  counted from ``trainer.global_step``;
* ``on_train_batch_start``: the batch is the ``<input>`` row (a
  ``training_step`` may call submodules, never the module itself);
* ``on_before_backward``: the loss, unscaled (the GradScaler multiplied it)
  and times ``accumulate_grad_batches`` (Lightning divided it), so that
  ``<loss>`` is the mean over the optimizer step's micro-batches;
* ``on_before_optimizer_step`` (after the closure, before clipping and the
  step): that loss goes to the step's record;
* validation and sanity checks run without gradients: not recorded;
* ``on_fit_end``, ``on_exception`` and ``teardown`` close the writer.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from .common import AttachedCallback

__all__ = ["NeuralDbgCallback"]


def _callback_bases() -> tuple:
    bases = []
    try:
        from lightning.pytorch import Callback as LightningCallback

        bases.append(LightningCallback)
    except ImportError:
        pass
    try:
        from pytorch_lightning import Callback as PLCallback

        if PLCallback not in bases:
            bases.append(PLCallback)
    except ImportError:
        pass
    if not bases:
        raise ImportError(
            "tb_neuraldbg.integrations.lightning needs Lightning: pip install lightning (or pytorch-lightning)"
        )
    return tuple(bases)


def _run_dir(trainer) -> str:
    """The TensorBoardLogger's run directory, else ``<default_root_dir>/neuraldbg``."""
    for logger in getattr(trainer, "loggers", None) or []:
        if type(logger).__name__ == "TensorBoardLogger":
            return logger.log_dir
    return os.path.join(trainer.default_root_dir, "neuraldbg")


def _scaler_of(trainer):
    plugin = getattr(trainer, "precision_plugin", None)
    if plugin is None:
        plugin = getattr(getattr(trainer, "strategy", None), "precision_plugin", None)
    scaler = getattr(plugin, "scaler", None)
    return scaler if scaler is not None and getattr(scaler, "_enabled", True) else None


class NeuralDbgCallback(AttachedCallback, *_callback_bases()):
    """Watch the LightningModule during ``fit`` (see the module docstring).

    ``log_dir``: where to write instead of the TensorBoardLogger's run
    directory. Other keyword arguments go to ``DebugWriter.watch``
    (``stats_every``, ``on_error``, ``include``, ...).
    """

    def __init__(self, log_dir: str | None = None, **watch_kwargs: Any):
        super().__init__()
        self._init_attachment(log_dir, watch_kwargs)
        self._scaler = None

    # -- attach -----------------------------------------------------------

    def on_fit_start(self, trainer, pl_module) -> None:
        optimizers = list(getattr(trainer, "optimizers", None) or [])
        if len(optimizers) > 1:
            warnings.warn(
                f"tb_neuraldbg: {len(optimizers)} optimizers; the first one's steps are recorded",
                RuntimeWarning,
            )
        self._scaler = _scaler_of(trainer)
        clip = getattr(trainer, "gradient_clip_val", None)  # (None or 0: Lightning does not clip)
        if getattr(trainer, "gradient_clip_algorithm", "norm") in (None, "norm"):
            self.attachment.watch_kwargs.setdefault("grad_clip", float(clip or 0))
        self.attachment.attach(
            self.log_dir or _run_dir(trainer),
            pl_module,
            optimizers[0] if optimizers else None,
            scaler=self._scaler,
            start_step=int(getattr(trainer, "global_step", 0)),
        )

    # -- each step --------------------------------------------------------

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.attachment.observe_input(batch)

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        scale = getattr(self._scaler, "_scale", None) if self._scaler is not None else None
        loss = loss.detach()
        if scale is not None:
            loss = loss / scale.to(loss.device)  # a tensor: no host sync
        accumulate = int(getattr(trainer, "accumulate_grad_batches", 1) or 1)
        if getattr(pl_module, "automatic_optimization", True) and accumulate > 1:
            loss = loss * accumulate
        self.attachment.add_loss(loss)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.attachment.before_step()

    # -- close ------------------------------------------------------------

    def on_fit_end(self, trainer, pl_module) -> None:
        self.attachment.close()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.attachment.close()

    def teardown(self, trainer, pl_module, stage) -> None:
        if stage == "fit":
            self.attachment.close()
