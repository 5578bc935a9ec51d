"""The Hugging Face Trainer: ``Trainer(..., callbacks=[NeuralDbgCallback()])``.

    from tb_neuraldbg.integrations.transformers import NeuralDbgCallback
    trainer = transformers.Trainer(model, args, train_dataset=ds, callbacks=[NeuralDbgCallback()])

What it does, event by event:

* ``on_train_begin`` (the model and optimizer are prepared then): opens a
  DebugWriter where ``report_to="tensorboard"`` writes (the directory of the
  event file TensorBoardCallback just opened, or ``TENSORBOARD_LOGGING_DIR``),
  so both land in one run; else ``<output_dir>/runs/neuraldbg``. Watches the
  model with the Trainer's optimizer, unwrapped from accelerate's
  ``AcceleratedOptimizer`` together with its GradScaler (fp16), steps counted
  from ``state.global_step``;
* every training forward: the loss the model computed (``output.loss``),
  before the Trainer divides it by the accumulation count;
* ``on_pre_optimizer_step``: the mean of those losses over the optimizer
  step's micro-batches goes to the step's record;
* evaluation runs without gradients: not recorded;
* ``on_train_end`` closes the writer (also at interpreter exit after an
  exception: DebugWriter's own exit hook).
"""

from __future__ import annotations

import glob
import os
import socket
from typing import Any

import torch

from ..training.modules import loss_of_output
from .common import AttachedCallback

try:
    from transformers import TrainerCallback
except ImportError as e:  # pragma: no cover - exercised without transformers
    raise ImportError(
        "tb_neuraldbg.integrations.transformers needs transformers: pip install transformers"
    ) from e

__all__ = ["NeuralDbgCallback", "tensorboard_dir"]


def tensorboard_dir(output_dir: str) -> str:
    """Where the Trainer's TensorBoardCallback writes in this process:
    ``TENSORBOARD_LOGGING_DIR``, else the directory of the newest event file
    this process opened under ``<output_dir>/runs``; else
    ``<output_dir>/runs/neuraldbg``."""
    env = os.getenv("TENSORBOARD_LOGGING_DIR")
    if env:
        return os.path.expanduser(env)
    # TensorBoard names its files events.out.tfevents.<time>.<host>.<pid>.<n>
    pattern = os.path.join(
        glob.escape(str(output_dir)), "runs", "**", f"events.out.tfevents.*.{socket.gethostname()}.{os.getpid()}.*"
    )
    files = sorted(glob.glob(pattern, recursive=True), key=os.path.getmtime)
    if files:
        return os.path.dirname(files[-1])
    return os.path.join(str(output_dir), "runs", "neuraldbg")


class NeuralDbgCallback(AttachedCallback, TrainerCallback):
    """Watch the Trainer's model during ``train()`` (see the module docstring).

    ``log_dir``: where to write instead of TensorBoard's run directory.
    Other keyword arguments go to ``DebugWriter.watch``.
    """

    def __init__(self, log_dir: str | None = None, **watch_kwargs: Any):
        self._init_attachment(log_dir, watch_kwargs)
        self._loss_hook = None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if model is None or self.attachment.attached:
            return
        # The Trainer clips at args.max_grad_norm (1.0 by default; 0 or None: off):
        # the diagnosis then does not advise clipping.
        self.attachment.watch_kwargs.setdefault("grad_clip", float(getattr(args, "max_grad_norm", None) or 0))
        self.attachment.attach(
            self.log_dir or tensorboard_dir(args.output_dir),
            model,
            optimizer,  # accelerate's wrapper: watch() unwraps it and takes its scaler
            start_step=int(state.global_step),
        )
        attachment = self.attachment

        def on_output(module, inputs, output):
            if module.training and torch.is_grad_enabled():
                loss = loss_of_output(output)
                if loss is not None:
                    attachment.add_loss(loss)

        self._loss_hook = model.register_forward_hook(on_output)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.attachment.before_step()

    def on_train_end(self, args, state, control, **kwargs):
        if self._loss_hook is not None:
            self._loss_hook.remove()
            self._loss_hook = None
        self.attachment.close()
