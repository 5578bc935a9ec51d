"""What the writer costs a step, measured as it runs: ``DebugWriter.stats_info``.

The shares are over one span of time each, so that they stay fractions on
a loaded machine (tests/test_writer_checks.py's
test_the_shares_stay_within_0_and_1 decides).
"""

from __future__ import annotations

import collections

from ..step import stats

__all__ = ["stats_info", "StepClock"]

PERIODS = 256  # steps whose wall-clock periods make the step time of stats_info


class StepClock:
    """The training loop's pace as the hooks see it, ticked at each
    recorded step's end (the hooks' own clock: ``tick(now, hook_ns)``).

    ``steps``: the steps recorded; ``periods_ns``: the wall-clock
    nanoseconds between the last PERIODS of them (their median is the step
    time ``stats_info`` compares the writer's cost with)."""

    def __init__(self):
        self.steps = 0
        self.periods_ns: collections.deque = collections.deque(maxlen=PERIODS)
        # (wall ns, hook ns until then) at the first and the last step
        self._first: tuple[int, int] | None = None
        self._last: tuple[int, int] | None = None

    def tick(self, now: int, hook_ns: int) -> None:
        self.steps += 1
        if self._last is not None:
            self.periods_ns.append(now - self._last[0])
        self._last = (now, hook_ns)
        if self._first is None:
            self._first = self._last

    def hook_window(self) -> tuple[int, int]:
        """(nanoseconds spent in the hooks, wall-clock nanoseconds) between
        the first and the last recorded step: the first step's one-time
        work (before any span) and pauses after the last are left out."""
        if self._first is None or self._last is None:
            return 0, 0
        return self._last[1] - self._first[1], self._last[0] - self._first[0]


def stats_info(worker) -> dict:
    """Counters of ``worker`` (the writer's current or last; {} for none):
    steps analysed, rows written, and whether the diagnosis engine is
    running; and what the writer costs, measured as it runs:
    ``steps_recorded`` (steps its hooks recorded), ``hooks_ms_per_step``
    (milliseconds a step spent in its hooks' bodies on the training side,
    replays included, averaged over every recorded step) and
    ``worker_ms_per_step`` (CPU milliseconds a step of its background
    thread, or with ``analysis="process"`` of its child process, after the
    first burst, which imports the diagnosis); ``step_ms``, the training
    loop's own step time (the median wall-clock time between two of its
    last 256 recorded steps, the writer's hooks included); None before
    there is a step to average over.

    The shares are fractions, within [0, 1] by construction:
    ``hooks_share`` is the time spent in the hooks between the first and
    the last recorded step over the wall-clock time between them (the part
    of the training thread's time the hooks took); ``worker_share`` is the
    worker's CPU time over the wall-clock time in which it was spent (from
    the end of its first burst to the end of its last: the part of a core
    it kept busy, its share of the step where it keeps up with training).
    Neither divides by the median step: that median leaves out the steps
    the worker's bursts slowed down, and the mean hook time holds the first
    step's one-time work, so a ratio to it could exceed 1 on a loaded
    machine. The hooks' time always adds to the step; the worker's where
    training needs the core or Python's GIL it runs on (a step bound by
    Python: a small model, often on a GPU). ``statistics`` names the back
    end that computed the statistics (``"torch"``: torch's own ops)."""
    if worker is None:
        return {}
    inst, counts = worker.sink.instrument, worker.counters()
    clock = inst.clock
    steps = clock.steps
    hooks = inst.hook_ns / 1e6 / steps if steps else None
    per_step = counts.cpu_s * 1e3 / counts.cpu_steps if counts.cpu_steps else None
    periods = sorted(clock.periods_ns)  # (a copy: the training thread appends)
    step = periods[len(periods) // 2] / 1e6 if periods else None
    return {
        "steps_analysed": counts.steps_analysed,
        "rows_written": counts.rows_written,
        "engine": counts.engine_running,
        "steps_recorded": steps,
        "hooks_ms_per_step": hooks,
        "worker_ms_per_step": per_step,
        "step_ms": step,
        "hooks_share": _share(*clock.hook_window()),
        "worker_share": _share(counts.cpu_s, counts.cpu_wall_s) if counts.cpu_steps else None,
        "statistics": stats.BACKEND,
    }


def _share(part: float, whole: float) -> float | None:
    """``part`` of ``whole``, both measured over one span of time, in [0, 1]
    (a clock's last digit can tip a span spent wholly in ``part`` over)."""
    if not whole or whole <= 0:
        return None
    return min(1.0, max(0.0, part / whole))
