"""Python's garbage collector held off while a hook makes and drops thousands of objects.

A step of a model with many parameters makes bursts of short-lived Python
objects in the hooks: ``torch._foreach_norm`` returns one 0-d tensor per
parameter (1,500 for the benchmark's 1,000-module model), stacked into one
tensor right after; the weight norms and the leftover-gradient check do the
same. Each burst crosses the collector's threshold (700 net allocations) and
starts young collections in its middle, which promote whatever is alive then
(the step's gradients, among others) towards the oldest generation; enough
promotions start a full collection of every object of the process (170-210
ms for the benchmark's training process). With collections held off for the
duration of the burst, its objects are freed before the count is looked at
again: in one run of 100 steps of that model each way (benchmarks/overhead.py's
``big``, side by side with the bare loop) the watched loop's collections fell
from 565 young, 50 middle and 3 full ones (730 ms) to 242, 22 and 1 (290 ms);
the bare loop's stayed at 275 and 25.

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
