"""The batch behind an event: kept by reference in training, saved as .npz by the worker.

The training thread keeps the last batches it was called with (no copy: the
tensors the user already holds) and adds the criterion's target to the
current one; the worker, a few steps behind, looks up the batch of an
event's step and saves it into the run directory as
``neuraldbg_batch_step<N>.npz`` (readable with ``numpy.load``, no pickle),
through TensorBoard's file layer, so that a run on object storage (s3://,
gs://, what TensorBoard can write) gets its batches beside its event file.

Both sides share one budget, :data:`BUDGET_BYTES`: the batches held together,
and the arrays of one saved file (cut along the batch dimension).
"""

from __future__ import annotations

import collections
import io

import numpy as np
import torch
from tensorboard.compat import tf

from .modules import iter_tensors
from .step.collector import host_finite

__all__ = ["BatchKeeper", "BUDGET_BYTES", "MAX_FILES"]

BUDGET_BYTES = 64 * 2**20
MAX_FILES = 8  # a run with many anomalies must not fill the disk
# The worker may lag behind training by a few steps (small models step
# faster than it analyses): up to this many batches are held while they are
# under the budget together, and at least 2.
_KEEP_MAX = 32


class BatchKeeper:
    """Recent batches by reference, and the .npz files of the events' batches.

    :meth:`keep`, :meth:`attach_target` and :meth:`note_step` run on the
    training thread, :meth:`save_for` on the worker's. The deque is only
    appended to and popped on the training side; the worker copies it in one
    C-level call (atomic under the GIL) before it searches.
    """

    def __init__(self):
        self._held: collections.deque = collections.deque()  # (step, args, kwargs)
        self._sizes: collections.deque = collections.deque()  # bytes of each
        # The first batch seen with a non-finite value, kept whatever the lag.
        self._suspect: tuple | None = None
        self.files_saved = 0
        self._saved_nonfinite = False
        self._paths: dict[int, str] = {}  # step -> file already saved

    # -- training side ----------------------------------------------------

    def keep(self, step: int, args, kwargs) -> None:
        """Hold the batch of ``step`` (the model's call arguments)."""
        size = sum(t.numel() * t.element_size() for t in iter_tensors(args, kwargs))
        held, sizes = self._held, self._sizes
        held.append((step, args, kwargs))
        sizes.append(size)
        while len(held) > 2 and (len(held) > _KEEP_MAX or sum(sizes) > BUDGET_BYTES):
            held.popleft()
            sizes.popleft()

    def attach_target(self, step: int, target: torch.Tensor) -> None:
        """Add the criterion's target to the batch of ``step`` (as kwarg
        ``target``), if that batch is held."""
        held = self._held
        if held and held[-1][0] == step:
            s, a, k = held[-1]
            held[-1] = (s, a, dict(k, target=target))

    def note_step(self, step: int, host: list) -> None:
        """At the end of ``step``: where its values are already on the host
        (CPU), the first step with a non-finite value keeps its batch."""
        last = self._unsuspected(step)
        if last is not None and host_finite(host) is False:
            self._suspect = last

    def note_nonfinite(self, step: int) -> None:
        """``step`` has a non-finite value (its check found one, on any
        device): the first such step keeps its batch, whatever the worker's
        lag, if it is the batch held last."""
        last = self._unsuspected(step)
        if last is not None:
            self._suspect = last

    def _unsuspected(self, step: int):
        """The batch held last if it is ``step``'s and none is kept as a
        non-finite one's yet; else None."""
        held = self._held
        return held[-1] if self._suspect is None and held and held[-1][0] == step else None

    @property
    def held(self) -> int:
        """How many recent batches are held now (the worker may lag by fewer
        steps than that and still find an event's batch)."""
        return len(self._held)

    def clear(self) -> None:
        """Drop every reference (the worker is done with them)."""
        self._held.clear()
        self._sizes.clear()
        self._suspect = None

    # -- worker side ------------------------------------------------------

    def batch_for(self, step: int):
        """(step, args, kwargs) of ``step``, or of the nearest earlier batch
        still held; None if none is held."""
        best = None
        held = list(self._held) + ([self._suspect] if self._suspect else [])
        for s, args, kwargs in held:
            if s <= step and (best is None or s > best[0]):
                best = (s, args, kwargs)
        return best

    def save_for(self, event, log_dir: str) -> str | None:
        """Save the batch behind ``event`` (a data anomaly, or the first
        non-finite event) into ``log_dir``; its path, or None when the event
        needs none (a recovery needs none), :data:`MAX_FILES` are written or
        no batch is held."""
        if getattr(event, "to_state", None) == "healthy":
            return None
        if event.kind == "nonfinite":
            if self._saved_nonfinite:
                return None
        elif event.kind != "data_anomaly":
            return None
        if self.files_saved >= MAX_FILES:
            return None
        found = self.batch_for(int(event.step))
        if found is None:
            return None
        step, args, kwargs = found
        if step in self._paths:  # two events of one batch: one file
            return self._paths[step]
        arrays = _arrays(args, kwargs)
        if not arrays:
            return None
        path = f"{str(log_dir).rstrip('/')}/neuraldbg_batch_step{step}.npz"
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        with tf.io.gfile.GFile(path, "wb") as f:
            f.write(buf.getvalue())
        self.files_saved += 1
        self._paths[step] = path
        if event.kind == "nonfinite":
            self._saved_nonfinite = True
        return path


def _arrays(args, kwargs) -> dict[str, np.ndarray]:
    """The batch's tensors as numpy arrays named ``arg<i>`` / by keyword,
    cut to :data:`BUDGET_BYTES` in all (whole samples, at least one)."""
    arrays: dict[str, np.ndarray] = {}
    budget = BUDGET_BYTES

    def put(name, t):
        nonlocal budget
        if not isinstance(t, torch.Tensor) or budget <= 0:
            return
        t = t.detach()
        if t.dtype == torch.bfloat16:  # numpy has no bfloat16
            t = t.float()
        per_row = t[0].numel() * t.element_size() if t.dim() > 0 and t.shape[0] else t.element_size()
        if t.dim() > 0 and t.numel() * t.element_size() > budget:
            t = t[: max(1, budget // max(per_row, 1))]
        a = t.cpu().numpy()
        arrays[name] = a
        budget -= a.nbytes

    for i, a in enumerate(args):
        put(f"arg{i}", a)
    for k, v in kwargs.items():
        put(str(k), v)
    return arrays
