"""The event file behind a DebugWriter, made unable to raise into training.

TensorBoard's ``EventFileWriter`` writes from a thread of its own; once a
write fails (the logdir deleted or made read-only, a full disk, a lost
bucket) it re-raises that error at every later ``add_*``, ``flush`` and
``close``: inside the user's training loop. :class:`GuardedFileWriter` wraps
torch's ``FileWriter``: the first failure is warned once (naming the
directory and the error) and from then on writes are dropped and counted.
What a user's *arguments* get wrong (a bad tensor for ``add_scalar``) is
still raised by ``SummaryWriter`` before it gets here.
"""

from __future__ import annotations

import logging
import warnings

__all__ = ["GuardedFileWriter"]

log = logging.getLogger("tb_neuraldbg")


class GuardedFileWriter:
    """A torch ``FileWriter`` (or None: creating it failed) whose writes never
    raise; ``failed`` says whether one did, ``dropped`` counts the writes
    lost since. Other attributes pass through to the wrapped writer."""

    def __init__(self, inner, log_dir: str, name: str = "tb_neuraldbg"):
        self.inner = inner
        self.log_dir = log_dir
        self.name = name  # message prefix (the rank in a distributed run)
        self.failed = inner is None
        self.dropped = 0

    def fail(self, what: str, e: BaseException) -> None:
        """Note a failure: warned the first time, counted after."""
        if not self.failed:
            self.failed = True
            msg = (
                f"{self.name}: cannot write the event file in {self.log_dir} ({what}: "
                f"{type(e).__name__}: {e}); training goes on, later TensorBoard writes are dropped"
            )
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
            log.warning(msg)
        self.dropped += 1

    def _call(self, what: str, *args, **kwargs):
        if self.inner is None or self.failed:
            self.dropped += 1
            return None
        try:
            return getattr(self.inner, what)(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 -- any I/O failure, by design
            self.fail(what, e)
            return None

    def add_event(self, *args, **kwargs) -> None:
        self._call("add_event", *args, **kwargs)

    def add_summary(self, *args, **kwargs) -> None:
        self._call("add_summary", *args, **kwargs)

    def add_graph(self, *args, **kwargs) -> None:
        self._call("add_graph", *args, **kwargs)

    def add_onnx_graph(self, *args, **kwargs) -> None:
        self._call("add_onnx_graph", *args, **kwargs)

    def flush(self) -> None:
        self._call("flush")

    def close(self) -> None:
        if self.inner is None:
            return
        try:
            self.inner.close()
        except Exception as e:  # noqa: BLE001
            if not self.failed:
                self.fail("close", e)

    def get_logdir(self) -> str:
        return self.log_dir

    def __getattr__(self, name):
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)
