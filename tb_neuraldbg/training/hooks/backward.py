"""Where a step's backward starts and ends: the two moments the gradients are looked at.

The backward is found at the model's outputs (a tensor hook on each, put
there by the instrument's output hook: one a step) or, where it does not go
through them (a LightningModule whose ``training_step`` calls sub-modules,
the gradients of an inner tensor's loss), by a hook on every trainable
parameter: on until a step's backward is seen at the outputs, again if one
is missed. The first call of a backward queues one callback at its end,
where every gradient is complete and not yet clipped by the user; in a
distributed run that callback queues itself once more, behind DDP's, which
writes the all-reduced gradients the optimizer will apply.
"""

from __future__ import annotations

from typing import Callable

import torch

__all__ = ["BackwardHooks"]


def _queue(callback: Callable[[], None]) -> None:
    torch.autograd.Variable._execution_engine.queue_callback(callback)


class BackwardHooks:
    """``on_start(param)`` runs at a backward's first gradient (``param``:
    the parameter whose gradient was just accumulated, when a per-parameter
    hook found it, else None) and says whether to follow this backward;
    ``on_end()`` runs at its end; ``on_fail()`` when torch's private queue
    is gone (the gradients are then measured at the optimizer step).
    ``after_reduce``: measure behind DDP's reducer."""

    def __init__(
        self, on_start: Callable[[object], bool], on_end: Callable[[], None], on_fail: Callable[[], None]
    ):
        self._on_start = on_start
        self._on_end = on_end
        self._on_fail = on_fail
        self.after_reduce = False
        self.per_param = True
        self._handles: list = []
        self.queued = False  # this backward's end callback is queued
        self.at_output = False  # this step's backward was seen at the model's output
        self._requeued = False

    def new_step(self) -> None:
        self.queued = self.at_output = False

    def hook_params(self, params: list) -> None:
        """Hook ``params`` while per-parameter hooks are on."""
        if self.per_param:
            for p in params:
                if p.requires_grad:  # (a frozen one refuses the hook)
                    self._handles.append(p.register_post_accumulate_grad_hook(self.start))

    def use_outputs(self) -> None:
        """The model's output leads to the backward: one tensor hook a step
        does, the per-parameter ones go."""
        self.per_param = False
        self.remove()

    def use_params(self, params: list) -> None:
        """A step's gradients came from a backward the outputs did not see:
        from now on it is followed through every parameter."""
        if not self.per_param:
            self.per_param = True
            self.hook_params(params)

    def start(self, fresh=None) -> None:
        """A backward reached a watched gradient: the first call of a
        followed backward queues the end callback."""
        if self.queued or not self._on_start(fresh):
            return
        self.queued = True
        try:
            _queue(self._end)
        except Exception:  # noqa: BLE001 -- a private API: measured elsewhere
            self.queued = False
            self._on_fail()

    def _end(self) -> None:
        if self.after_reduce and not self._requeued:
            try:
                _queue(self._end)
                self._requeued = True
                return
            except Exception:  # noqa: BLE001 -- measure now rather than never
                pass
        self._requeued = False
        self.queued = False
        self._on_end()

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
