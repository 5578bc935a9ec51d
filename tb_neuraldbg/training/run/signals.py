"""SIGTERM and SIGINT: the watching writers' last steps on disk before the
signal does what it would have done.

Python's default action for SIGTERM ends the process at once, without
``atexit``: the steps a writer's worker had not written yet (an event among
them) would be lost, and the run would not say that it was cut. While at
least one DebugWriter watches a model, :func:`register` puts a handler of
ours in front of whatever handled these signals before (installed from the
main thread only, the one thread Python lets set them). On a signal it:

- with the default action behind it (SIGTERM's, or SIG_DFL set by hand):
  closes every watching writer (their steps analysed, written and flushed,
  and the run marked closed), each within its ``drain_timeout``, then
  restores the default and raises the signal again, so that the process
  ends as it would have, with the signal's exit status;
- with a Python handler behind it (the user's, or SIGINT's
  ``default_int_handler`` that raises ``KeyboardInterrupt``): drains every
  watching writer (everything recorded so far analysed, written and
  flushed, the writer still open) within the same bound, then calls that
  handler: it is chained, never replaced; training may go on after it.

A signal that was ignored (SIG_IGN) or handled outside Python stays as it
was: no handler of ours is put in front of it. Several writers share one
handler; :func:`unregister` at each ``close()`` puts the earlier handlers
back once no writer watches, unless something else was installed over ours
since (ours then stays behind it, passing the signal on).

tests/test_signals.py decides: real child trainers (thread and process
analysis) signalled a few steps after a NaN batch, the exit status and the
time they take, the chaining and the restoring of handlers.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import weakref

__all__ = ["SIGNALS", "register", "unregister", "delivered"]

#: The signals a watching writer handles.
SIGNALS = (signal.SIGTERM, signal.SIGINT)

# The writers watching now (their close() unregisters them).
_writers: "weakref.WeakSet" = weakref.WeakSet()
_lock = threading.Lock()
# The last signal handled (None: none): at interpreter exit after a
# KeyboardInterrupt, writers are closed within their drain_timeout.
_delivered: int | None = None


def delivered() -> int | None:
    """The last signal a writer's handler acted on in this process, or None."""
    return _delivered


class _Handler:
    """Ours, in front of ``previous`` (a Python callable or SIG_DFL)."""

    def __init__(self, signum: int, previous):
        self.signum = signum
        self.previous = previous

    def __call__(self, signum, frame):
        global _delivered
        _delivered = signum
        ends = not callable(self.previous)  # SIG_DFL: the process ends
        with _lock:
            writers = list(_writers)
        bound = max((w.drain_timeout for w in writers), default=0.0)
        deadline = time.monotonic() + bound
        for w in writers:
            try:
                w._on_signal(signum, max(0.0, deadline - time.monotonic()), close=ends)
            except Exception:  # noqa: BLE001 -- the signal must still do what it would have
                pass
        if not ends:
            return self.previous(signum, frame)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return None


def register(writer) -> bool:
    """Handle SIGTERM and SIGINT for ``writer`` (its ``_on_signal``,
    ``drain_timeout``) while it watches. From the main thread only (False
    elsewhere: nothing is installed)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    with _lock:
        _writers.add(writer)
    for signum in SIGNALS:
        current = signal.getsignal(signum)
        if isinstance(current, _Handler) or current in (signal.SIG_IGN, None):
            continue  # ours already; or ignored, or set outside Python: left alone
        try:
            signal.signal(signum, _Handler(signum, current))
        except (ValueError, OSError):  # (an embedded interpreter without signals)
            pass
    return True


def unregister(writer) -> None:
    """``writer`` no longer watches; once none does (and from the main
    thread), the handlers that were there before ours are put back where
    ours is still the one installed."""
    with _lock:
        _writers.discard(writer)
        if len(_writers):
            return
    if threading.current_thread() is not threading.main_thread():
        return  # ours stays: with no writer it passes every signal on
    for signum in SIGNALS:
        current = signal.getsignal(signum)
        while isinstance(current, _Handler):
            try:
                signal.signal(signum, current.previous)
            except (ValueError, OSError):
                break
            current = current.previous
