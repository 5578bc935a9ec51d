"""`neuraldbg demo`: train every demo scenario, report, open TensorBoard.

The scenarios live in demo/ of the source tree and are installed as
``tb_neuraldbg._demo``; each trains a tiny model on CPU for a few seconds into
its own run directory of one logdir. ``run`` then prints the report of that
logdir (what ``neuraldbg report`` prints), a table of planted versus found
root causes, and either serves TensorBoard on the logdir until Ctrl-C or
prints the command that would.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from typing import Optional, TextIO

__all__ = ["DEFAULT_LOGDIR", "run", "planted_cause_problems"]

DEFAULT_LOGDIR = "neuraldbg_demo"  # relative to the current directory
_BAR_WIDTH = 24


class _ProgressBar:
    """One line per scenario on stderr; redrawn in place on a terminal.

    Without a terminal (CI logs, pipes) only the finished line is printed, so
    a log does not fill up with carriage returns.
    """

    def __init__(self, stream: TextIO, runs: int, name_width: int):
        self._stream = stream
        self._tty = stream.isatty()
        self._runs = runs
        self._name_width = name_width
        self._index = 0
        self._name = ""
        self._shown = -1
        self._done = 0
        self._started = 0.0

    def start(self, index: int, name: str) -> None:
        self._index, self._name, self._shown, self._done = index, name, -1, 0
        self._started = time.monotonic()

    def _line(self, done: int, total: int, tail: str) -> str:
        filled = _BAR_WIDTH * done // max(total, 1)
        bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
        head = f"[{self._index}/{self._runs}] {self._name:<{self._name_width}}"
        return f"{head} [{bar}] {tail}"

    def update(self, done: int, total: int) -> None:
        """A scenario's ``progress`` callback: ``done`` of ``total`` steps."""
        self._done = done
        # Redraw only when the bar moves: a print per step would cost more
        # than the tiny training steps themselves.
        filled = _BAR_WIDTH * done // max(total, 1)
        if not self._tty or filled == self._shown:
            return
        self._shown = filled
        self._stream.write("\r" + self._line(done, total, f"{done}/{total}"))
        self._stream.flush()

    def finish(self, total: int, note: str = "") -> None:
        seconds = time.monotonic() - self._started
        done = self._done
        tail = f"{done}/{total} steps in {seconds:.1f} s" + (f"  {note}" if note else "")
        self._stream.write(("\r" if self._tty else "") + self._line(done, total, tail) + "\n")
        self._stream.flush()


def planted_cause_problems(expected: Optional[dict], report: dict) -> list:
    """What a run's report misses of its planted cause; [] when it names it.

    ``expected`` is a scenario's EXPECTED: None for the healthy control (no
    root cause and no warning or error event allowed), else {"kind", "layer"}
    of the root cause and optionally "also": event kinds that must appear.
    """
    problems = []
    cause = report.get("root_cause")
    events = report.get("events", [])
    if expected is None:
        if cause is not None:
            problems.append(f"unexpected root cause {cause.get('kind')} at {cause.get('layer')}")
        loud = [e for e in events if e.get("severity") in ("warning", "error")]
        if loud:
            first = loud[0]
            problems.append(
                f"{len(loud)} warning/error event(s), first {first.get('kind')} "
                f"at {first.get('layer')} step {first.get('step')}"
            )
        return problems
    if cause is None:
        problems.append("no root cause")
    elif (cause.get("kind"), cause.get("layer")) != (expected["kind"], expected["layer"]):
        problems.append(f"root cause is {cause.get('kind')} at {cause.get('layer')}")
    kinds = {e.get("kind") for e in events}
    for kind in expected.get("also", ()):
        if kind not in kinds:
            problems.append(f"no {kind} event")
    return problems


def _describe(expected: Optional[dict]) -> str:
    if expected is None:
        return "nothing (healthy)"
    return f"{expected['kind']} at {expected['layer']}"


def _train_all(logdir: str, err: TextIO) -> list:
    """Run every scenario into logdir; returns [(module, outcome)], the outcome
    None (it ran), an exception (it crashed) or a string (why it was skipped)."""
    import torch

    from ._demo import SCENARIOS, load

    # Tiny models: one thread beats paying for thread wake-ups on every op.
    torch.set_num_threads(1)
    scenarios = [load(name) for name in SCENARIOS]
    bar = _ProgressBar(err, len(scenarios), max(len(s.NAME) for s in scenarios))
    # The writer logs one line per error event; the report below tells the same
    # story in order, so keep those lines from breaking the progress bars.
    quiet = logging.getLogger("tb_neuraldbg")
    saved_level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # setLevel, not .level=: it clears logging's cache
    results = []
    try:
        for index, scenario in enumerate(scenarios, start=1):
            bar.start(index, scenario.NAME)
            # A scenario may need more than this torch has (unsupported() says why).
            reason = getattr(scenario, "unsupported", lambda: None)()
            if reason:
                bar.finish(scenario.STEPS, f"skipped: {reason}")
                results.append((scenario, reason))
                continue
            try:
                scenario.run(logdir, progress=bar.update)
            except Exception as e:  # report it, go on with the other scenarios
                bar.finish(scenario.STEPS, f"FAILED: {type(e).__name__}: {e}")
                results.append((scenario, e))
                continue
            bar.finish(scenario.STEPS)
            results.append((scenario, None))
    except KeyboardInterrupt:
        err.write("\n")  # end the half-drawn bar line; the CLI exits 130
        raise
    finally:
        quiet.setLevel(saved_level)
    return results


def _report(logdir: str, results: list, out: TextIO) -> None:
    """Print the report of the demo runs, then planted versus found."""
    from .offline.reader import read_run
    from .format.contract import logdir_report, run_report
    from .offline.text_report import format_report

    # Only the runs this demo wrote: a logdir may hold other runs too.
    reports, unreadable = {}, {}
    for scenario, outcome in results:
        if outcome is None:
            try:
                run = read_run(os.path.join(logdir, scenario.NAME))
            except ValueError as e:  # FormatError too: no or unreadable neuraldbg data
                unreadable[scenario.NAME] = str(e)
                continue
            reports[scenario.NAME] = run_report(run.name, run.diagnosis, run.events)
    names = [scenario.NAME for scenario, _ in results if scenario.NAME in reports]
    width = max(60, min(shutil.get_terminal_size((80, 24)).columns, 100))
    out.write(format_report(logdir_report([reports[n] for n in names]), width))
    out.write("\nPlanted versus found:\n")
    for scenario, outcome in results:
        if isinstance(outcome, str):
            verdict = f"skipped: {outcome}"
        elif outcome is not None:
            verdict = "did not run"
        elif scenario.NAME not in reports:
            verdict = f"unreadable: {unreadable[scenario.NAME]}"
        else:
            problems = planted_cause_problems(scenario.EXPECTED, reports[scenario.NAME])
            verdict = "ok" if not problems else "MISSED: " + "; ".join(problems)
        out.write(f"  {scenario.NAME:<12} {_describe(scenario.EXPECTED):<36} {verdict}\n")
    out.flush()


def _wait_for_ctrl_c() -> None:
    # Short sleeps: the kernel may deliver SIGINT to any thread (TensorBoard
    # serves from several), and then Python only raises KeyboardInterrupt
    # when the main thread next runs; one long sleep left Ctrl-C unanswered.
    while True:
        time.sleep(0.2)


def _serve(logdir: str, out: TextIO, wait=_wait_for_ctrl_c) -> int:
    """Serve TensorBoard on logdir until Ctrl-C (until ``wait`` raises
    KeyboardInterrupt); the server thread is a daemon and ends with the process."""
    from tensorboard import program

    board = program.TensorBoard()
    # No --port: TensorBoard takes 6006, or the next free port after it.
    board.configure(argv=[None, "--logdir", logdir, "--host", "127.0.0.1"])
    try:
        url = board.launch()  # serves from a background thread
    except program.TensorBoardServerException as e:
        out.write(f"\nTensorBoard could not start: {e}\nRun: tensorboard --logdir {logdir}\n")
        return 1
    out.write(f"\nTensorBoard is serving {logdir} at {url}#neuraldbg  (Ctrl-C stops it)\n")
    out.flush()
    try:
        wait()
    except KeyboardInterrupt:
        out.write("\nTensorBoard stopped.\n")
        out.flush()
    return 0


def run(logdir: Optional[str], serve: bool) -> int:
    """Entry point of `neuraldbg demo [--logdir DIR] [--no-serve]`.

    Trains every scenario into ``logdir`` (default ./neuraldbg_demo; a rerun
    replaces the runs it wrote before), prints the report, then serves
    TensorBoard (``serve``) or prints the command. Returns the exit code:
    0, or 1 when a scenario crashed (a scenario this torch cannot run is
    skipped, not a failure).
    """
    logdir = os.path.abspath(logdir or DEFAULT_LOGDIR)
    out, err = sys.stdout, sys.stderr
    err.write(f"neuraldbg demo: training the scenarios into {logdir}\n")
    err.flush()
    results = _train_all(logdir, err)
    _report(logdir, results, out)
    code = 1 if any(isinstance(outcome, Exception) for _, outcome in results) else 0
    if serve:
        return _serve(logdir, out) or code
    out.write(f"\nTo look at the runs:  tensorboard --logdir {logdir}\n")
    out.write(f"For the report again: neuraldbg report {logdir}\n")
    out.flush()
    return code
