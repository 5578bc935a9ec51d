"""One live DebugWriter per run directory: a second one is said, in one line.

Two writers in one run directory at once (two scripts, a notebook cell run
twice, two ranks given one log_dir) write two event files whose steps
interleave; TensorBoard shows them as one run, mixed. A DebugWriter takes an
exclusive ``flock`` on ``<log_dir>/.neuraldbg.lock`` (holding its pid and
host) while it is open; a writer that finds it held warns, naming the
holder, and goes on (the user's training is never stopped for it). The lock
goes with its holder: released at ``close()``, and by the system when the
process ends however it ends, so a killed run leaves nothing held.

Local directories on POSIX only: remote logdirs (s3://, ...) have no
``flock``. The reader says it too when two files of a run interleave
(tests/test_writer_checks.py decides both).
"""

from __future__ import annotations

import os
import socket
import warnings

try:
    import fcntl
except ImportError:  # pragma: no cover -- not POSIX
    fcntl = None

__all__ = ["LOCK_NAME", "RunLock"]

LOCK_NAME = ".neuraldbg.lock"



class RunLock:
    """The lock of one run directory, held from :meth:`acquire` to :meth:`release`."""

    def __init__(self, log_dir: str):
        self.path = os.path.join(log_dir, LOCK_NAME)
        self._fd: int | None = None

    def acquire(self, tag: str = "tb_neuraldbg") -> bool:
        """Take the lock; when another live writer holds it, warn (one line)
        and return False. Failures to lock (a file system without locks, no
        permission) are silent: the lock is a courtesy, not a guarantee."""
        if fcntl is None or "://" in self.path:
            return True
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            msg = (f"{tag}: another DebugWriter ({holder}) is writing into {os.path.dirname(self.path)}: "
                   "two writers in one run directory mix their steps; give each its own log_dir")
            warnings.warn(msg, RuntimeWarning, stacklevel=3)  # (the user's DebugWriter(...))
            return False
        except OSError:
            os.close(fd)
            return True
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        except OSError:
            pass
        self._fd = fd
        return True

    def release(self) -> None:
        """Let go of the lock (safe twice). The file stays: removing it would
        race with a writer opening it."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass
        os.close(fd)


def _read(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text.splitlines()[0] if text else "pid unknown"
