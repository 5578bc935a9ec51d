"""Hook bodies that can never break training, and what they cost it.

Every hook body of the writer runs through :meth:`HookGuard.run`: an
exception is warned once, switches that part of the monitoring off, and the
user's loop goes on with less data. The same call counts the nanoseconds
spent in the hooks (``DebugWriter.stats_info``'s ``hooks_ms_per_step``).
"""

from __future__ import annotations

import warnings
from time import perf_counter_ns

from .. import distributed

__all__ = ["HookGuard"]

# The most of an exception's message a warning repeats: PyTorch's dispatcher
# errors list every backend on 200 lines (tests/test_sparse_outputs.py).
_MAX_REASON = 300


def _first_line(e: BaseException) -> str:
    text = str(e).strip().split("\n", 1)[0]
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 3] + "..."


class HookGuard:
    """``broken``: the parts switched off; ``removed``: every hook is off
    (nothing runs); ``hook_ns``: the time spent in guarded bodies, nested
    ones counted once."""

    __slots__ = ("broken", "removed", "hook_ns", "_inside", "_t0")

    def __init__(self):
        self.broken: set[str] = set()
        self.removed = False
        self.hook_ns = 0
        self._inside = False
        self._t0 = 0  # perf_counter_ns() at the start of the body running now

    @property
    def busy(self) -> bool:
        """A guarded body is running now (seen from a signal handler that
        interrupted it on the same thread)."""
        return self._inside

    def ns_until(self, now: int) -> int:
        """``hook_ns`` up to ``now`` (a ``perf_counter_ns()``), the body
        running now counted to that moment: a span of the training thread's
        time holds no more hook time than its own length."""
        return self.hook_ns + (now - self._t0 if self._inside else 0)

    def fail(self, part: str, e: BaseException) -> None:
        """``part`` failed with ``e`` (caught here or by the caller): warned
        once, and ``part`` off from then on."""
        if part in self.broken or self.removed:
            return
        self.broken.add(part)
        msg = (
            f"{distributed.tag()}: monitoring of the {part} failed and is switched off: "
            f"{type(e).__name__}: {_first_line(e)}"
        )
        warnings.warn(msg, RuntimeWarning, stacklevel=3)

    def run(self, part: str, fn, *args):
        """``fn(*args)``, or None when ``part`` is off or it fails (warned
        once, and ``part`` off from then on). The ``TrainingFailure`` of
        ``on_error="raise"`` is raised outside, never through here."""
        if part in self.broken or self.removed:
            return None
        outer = not self._inside  # (the clock read twice a hook, not at every nested part)
        if outer:
            self._inside = True
            self._t0 = t0 = perf_counter_ns()
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 -- anything, by design
            self.fail(part, e)
            return None
        finally:
            if outer:
                self._inside = False
                self.hook_ns += perf_counter_ns() - t0
