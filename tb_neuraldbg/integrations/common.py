"""What the framework callbacks share: one DebugWriter attached to the
framework's model and optimizer, and the loss of a whole optimizer step."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ..training.writer import DebugWriter

__all__ = ["Attachment", "StepLoss"]


class StepLoss:
    """The loss of one optimizer step: the mean of its micro-batches'
    losses, kept on the device (adding never waits for it)."""

    def __init__(self):
        self._sum: torch.Tensor | None = None
        self._count = 0

    def add(self, loss: torch.Tensor) -> None:
        """One micro-batch's loss, as the user's step computed it (unscaled,
        not divided by the accumulation count)."""
        loss = loss.detach().float()
        loss = loss if loss.numel() == 1 else loss.mean()
        self._sum = loss if self._sum is None else self._sum + loss
        self._count += 1

    def take(self) -> torch.Tensor | None:
        """The mean so far (None without any), and start the next step."""
        if self._sum is None:
            return None
        mean = self._sum / self._count
        self._sum, self._count = None, 0
        return mean


class Attachment:
    """One DebugWriter watching a framework's model: opened by
    :meth:`attach`, given the step's loss by :meth:`add_loss` and
    :meth:`before_step`, closed by :meth:`close` (safe twice)."""

    def __init__(self, watch_kwargs: dict):
        self.watch_kwargs = dict(watch_kwargs)
        self.writer: DebugWriter | None = None
        self.handle = None
        self.loss = StepLoss()

    @property
    def attached(self) -> bool:
        return self.writer is not None

    def attach(self, log_dir: str, model, optimizer: Any, scaler: Any = None, start_step: int = 0) -> None:
        """Open the writer in ``log_dir`` and watch ``model`` stepped by
        ``optimizer`` (wrappers accepted) with ``scaler``."""
        if self.writer is not None:
            return
        kwargs = dict(self.watch_kwargs)
        kwargs.setdefault("start_step", int(start_step))
        writer = DebugWriter(log_dir)
        try:
            self.handle = writer.watch(model, optimizer=optimizer, scaler=scaler, **kwargs)
        except BaseException:
            writer.close()
            raise
        self.writer = writer

    def observe_input(self, batch) -> None:
        """This step's batch, as the framework hands it to the user's step."""
        if self.handle is None:
            return
        if isinstance(batch, dict):
            self.handle.instrument.observe_input((), batch)
        elif isinstance(batch, (list, tuple)):
            self.handle.instrument.observe_input(tuple(batch), {})
        else:
            self.handle.instrument.observe_input((batch,), {})

    def add_loss(self, loss) -> None:
        if self.writer is not None and isinstance(loss, torch.Tensor):
            self.loss.add(loss)

    def before_step(self) -> None:
        """Right before the optimizer step: the step's loss goes to its record."""
        loss = self.loss.take()
        if self.writer is not None and loss is not None:
            self.writer.record(loss=loss)

    def close(self) -> None:
        writer, self.writer, self.handle = self.writer, None, None
        if writer is not None:
            try:
                writer.close()
            except Exception as e:  # noqa: BLE001 -- never break the framework's shutdown
                warnings.warn(f"tb_neuraldbg: closing the writer failed: {e}", RuntimeWarning)
