"""Python's garbage collector held off while a hook makes and drops thousands of objects.

A step of a model with many parameters makes bursts of short-lived Python
objects in the hooks: ``torch._foreach_norm`` returns one 0-d tensor per
parameter, stacked into one tensor right after; the weight norms and the
leftover-gradient check do the same. Each burst crosses the collector's
threshold and starts young collections in its middle, which promote
whatever is alive then (the step's gradients, among others) towards the
oldest generation; enough promotions start a full collection of every
object of the process. With collections held off for the duration of the
burst, its objects are freed before the count is looked at again
(``benchmarks/overhead.py --models big`` shows the collections saved).

Only around the instrumentation's own work, with one exception: a replay (a
step with a non-finite value re-run with every check, see :mod:`.replay`)
runs the user's model inside these hooks, and collections then wait until it
is done (postponed, never skipped; a replay is one forward and backward). A
collector the user disabled stays disabled.
"""

from __future__ import annotations

import functools
import gc

__all__ = ["gc_paused"]


def gc_paused(method):
    """Decorate ``method`` to run with Python's garbage collector disabled
    (when it was enabled), re-enabled however the method ends."""

    @functools.wraps(method)
    def paused(*args, **kwargs):
        if not gc.isenabled():
            return method(*args, **kwargs)
        gc.disable()
        try:
            return method(*args, **kwargs)
        finally:
            gc.enable()

    return paused
