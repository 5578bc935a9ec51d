"""The event file behind a DebugWriter, made unable to raise into training.

TensorBoard's ``EventFileWriter`` writes from a thread of its own; once a
write fails (the logdir deleted or made read-only, a full disk, a lost
bucket) it re-raises that error at every later ``add_*``, ``flush`` and
``close``: inside the user's training loop. :class:`GuardedFileWriter` wraps
torch's ``FileWriter``: the first failure is warned once (naming the
directory and the error) and from then on writes are dropped and counted.
What a user's *arguments* get wrong (a bad tensor for ``add_scalar``) is
still raised by ``SummaryWriter`` before it gets here.

:class:`SummaryFile` is the worker's view of that file: each tag's summary
metadata goes with its first write to the file only.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable

__all__ = ["GuardedFileWriter", "SummaryFile"]

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
        self._quiet_background_writes()

    def _quiet_background_writes(self) -> None:
        """Make TensorBoard's writer thread note a failed write instead of
        dying with a traceback on the user's console.

        Its ``_AsyncWriterThread`` re-raises any write error, which Python
        prints as an unhandled thread exception (and the writer then raises it
        at every later call). The thread's record writer is wrapped so that a
        failure reaches :meth:`fail` and later records are dropped. These are
        TensorBoard's private attributes: where they are not found, nothing
        changes (the call-side guard still holds)."""
        event_writer = getattr(self.inner, "event_writer", None)
        worker = getattr(getattr(event_writer, "_async_writer", None), "_worker", None)
        records = getattr(worker, "_record_writer", None)
        if records is None or not hasattr(records, "write") or isinstance(records, _GuardedRecords):
            return
        worker._record_writer = _GuardedRecords(records, self)

    def fail(self, what: str, e: BaseException) -> None:
        """Note a failure: warned the first time, counted after."""
        if not self.failed:
            self.failed = True
            msg = (
                f"{self.name}: cannot write the event file in {self.log_dir} ({what}: "
                f"{type(e).__name__}: {e}); training goes on, later TensorBoard writes are dropped"
            )
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
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

    def add_record(self, data: bytes) -> None:
        """One serialized Event (from a worker process): handed as it is to
        TensorBoard's writer thread where that is reachable, else parsed
        again and added."""
        raw = getattr(getattr(getattr(self.inner, "event_writer", None), "_async_writer", None), "write", None)
        try:
            if raw is not None and not self.failed:
                raw(data)
            else:
                from tensorboard.compat.proto import event_pb2

                event = event_pb2.Event.FromString(data)
                self.add_event(event, step=event.step, walltime=event.wall_time)
        except Exception as e:  # noqa: BLE001 -- any I/O failure, by design
            self.fail("write", e)

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


class SummaryFile:
    """Summaries into the event file that ``file_writer()`` returns now (a
    DebugWriter may open another), each tag's metadata only with its first
    write to that file (TensorBoard keeps the first seen)."""

    def __init__(self, file_writer: Callable):
        self._file_writer = file_writer
        self._fw = None
        self._seen: set[str] = set()

    def get(self):
        """The file now (a new one forgets the tags seen)."""
        fw = self._file_writer()
        if fw is not self._fw:
            self._fw, self._seen = fw, set()
        return fw

    def seen(self, tags: Iterable[str]) -> bool:
        """Every tag of ``tags`` was written to the file of the last :meth:`get`."""
        return self._seen.issuperset(tags)

    def add(self, summ, step: int) -> None:
        fw = self.get()
        for v in summ.value:
            if v.tag in self._seen:
                v.ClearField("metadata")
            else:
                self._seen.add(v.tag)
        fw.add_summary(summ, global_step=step)


class _GuardedRecords:
    """TensorBoard's record writer, seen from its writer thread: a failed
    write or flush is noted on the guard and never raised in that thread."""

    def __init__(self, inner, guard: GuardedFileWriter):
        self._inner = inner
        self._guard = guard

    def _call(self, what: str, *args):
        if self._guard.failed:
            self._guard.dropped += 1
            return None
        try:
            return getattr(self._inner, what)(*args)
        except Exception as e:  # noqa: BLE001 -- any I/O failure, by design
            self._guard.fail(f"background {what}", e)
            return None

    def write(self, data) -> None:
        self._call("write", data)

    def flush(self) -> None:
        self._call("flush")

    def close(self) -> None:
        try:
            self._inner.close()
        except Exception as e:  # noqa: BLE001
            if not self._guard.failed:
                self._guard.fail("close", e)
