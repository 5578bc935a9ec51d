"""The ``neuraldbg`` command: ``report`` or ``export`` a logdir, run the ``demo``.

    neuraldbg report LOGDIR [--json] [--fail-on error|warning] [--rediagnose]
    neuraldbg export LOGDIR [-o FILE] [--fail-on error|warning] [--rediagnose]
    neuraldbg demo [--logdir DIR] [--no-serve]

``report`` exits 0 whatever it finds, unless ``--fail-on`` asks otherwise
(1 = the threshold was reached), and 2 for a bad command line or a logdir it
cannot report on. Problems are one-line messages on stderr, never tracebacks.
What of a logdir could not be read (a run of a newer format, a corrupt
record, a FIFO...) is one line on stderr too, and in the report: a run that
lost data reads "incomplete".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

from ._version import __version__
from .format.contract import NeuralDbgDataWarning, annotate, logdir_report, run_report
from .offline.text_report import DEFAULT_MAX_EVENTS, format_report

__all__ = ["main", "build_parser"]

EXIT_OK = 0
EXIT_FAIL_ON = 1
EXIT_USAGE = 2


class _UsageError(Exception):
    """A problem with the command line or the logdir: message, exit 2."""


def _add_logdir_options(p: argparse.ArgumentParser) -> None:
    """LOGDIR, --fail-on and --rediagnose: shared by report and export."""
    p.add_argument("logdir", metavar="LOGDIR", help="TensorBoard log directory")
    p.add_argument(
        "--fail-on",
        choices=("error", "warning"),
        default=None,
        help="exit 1 when a run is failing (error) or has any warning or error (warning)",
    )
    p.add_argument(
        "--rediagnose",
        action="store_true",
        help="re-run the diagnosis offline over the stored statistics",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neuraldbg",
        description="Find the first failing layer of a PyTorch training run.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    rep = sub.add_parser(
        "report",
        help="report the diagnosis of every run in a logdir",
        description="Report each run: status, root cause, then a timeline of events. "
        "By default the events and diagnosis stored online by DebugWriter (which "
        "analysed every step) are reported.",
        epilog="exit status: 0 whatever is found; 1 when --fail-on is reached; "
        "2 for a bad command line or a logdir without readable neuraldbg data",
    )
    _add_logdir_options(rep)
    rep.add_argument("--json", action="store_true", help="print the report as one JSON object")
    rep.add_argument(
        "--width", type=int, default=80, help="terminal report width in columns (default 80)"
    )
    rep.add_argument(
        "--all",
        action="store_true",
        help="list every event on its own (by default similar events of one step "
        "share a line, and at most %d entries are shown per run)" % DEFAULT_MAX_EVENTS,
    )
    rep.set_defaults(func=_cmd_report)

    exp = sub.add_parser(
        "export",
        help="write a self-contained HTML report (state map and events per run)",
    )
    _add_logdir_options(exp)
    exp.add_argument(
        "-o", "--output", default="neuraldbg-report.html", help="HTML file to write"
    )
    exp.set_defaults(func=_cmd_export)

    demo = sub.add_parser("demo", help="write demo failure runs and open them in TensorBoard")
    demo.add_argument("--logdir", default=None, help="where to write the demo runs")
    demo.add_argument(
        "--no-serve", action="store_true", help="write the runs, do not start TensorBoard"
    )
    demo.set_defaults(func=_cmd_demo)
    return parser


def _collect_runs(logdir: str, rediagnose: bool) -> tuple[list, list[dict], list[str]]:
    """The runs under ``logdir``, their report dicts (with what could not be
    read) and the notes about the logdir (raises _UsageError)."""
    from .offline.reader import read_logdir

    notes: list[str] = []
    try:
        runs = read_logdir(logdir, notes)
    except (FileNotFoundError, NotADirectoryError) as e:
        raise _UsageError(str(e)) from None
    if not runs:
        raise _UsageError(f"no readable neuraldbg data under {logdir}")
    reports = []
    for run in runs:
        if rediagnose:
            from .offline.rediagnose import diagnose_run

            _note_gaps(run)
            rep, skipped = diagnose_run(run).to_report(), []
        else:
            rep, skipped = _stored_report(run)
        reports.append(annotate(rep, run.warnings + skipped, run.incomplete or bool(skipped),
                                run.complete, run.last_step))
    return runs, reports, notes


def _stored_report(run) -> tuple[dict, list[str]]:
    """The report of the diagnosis and events stored online, and what the
    contract had to skip of them (warned, and kept with the run's warnings)."""
    skipped: list[str] = []

    def note(message: str) -> None:
        warnings.warn(f"run {run.name[:200]!r}: {message}", NeuralDbgDataWarning, stacklevel=2)
        skipped.append(message)

    return run_report(run.name, run.diagnosis, run.events, note), skipped


def _note_gaps(run) -> None:
    """Say when a replay cannot see every step the writer analysed online."""
    if run.num_steps < 2:
        return
    span = int(run.steps[-1] - run.steps[0]) + 1
    if span > run.num_steps:
        print(
            f"neuraldbg: note: run {run.name!r} stores statistics for {run.num_steps} "
            f"of its {span} steps; the offline diagnosis may differ from the one "
            "made online (drop --rediagnose to see that one)",
            file=sys.stderr,
        )


def _exit_code(runs: list[dict], fail_on: str | None) -> int:
    if fail_on == "error":
        return EXIT_FAIL_ON if any(r["status"] == "failing" for r in runs) else EXIT_OK
    if fail_on == "warning":
        bad = any(
            r["status"] == "failing"
            or any(e["severity"] in ("warning", "error") for e in r["events"])
            for r in runs
        )
        return EXIT_FAIL_ON if bad else EXIT_OK
    return EXIT_OK


def _cmd_report(args) -> int:
    _, runs, notes = _collect_runs(args.logdir, args.rediagnose)
    report = logdir_report(runs, notes)
    if args.json:
        # allow_nan=False: the report is strict JSON (run_report maps NaN to null).
        sys.stdout.write(json.dumps(report, indent=2, allow_nan=False) + "\n")
    else:
        if args.all:
            text = format_report(report, width=args.width, max_events=sys.maxsize, compact=False,
                                 logdir=args.logdir)
        else:
            text = format_report(report, width=args.width, logdir=args.logdir)
        sys.stdout.write(text)
    return _exit_code(runs, args.fail_on)


def _cmd_export(args) -> int:
    from .offline.html_report import render_html

    runs, reports, notes = _collect_runs(args.logdir, args.rediagnose)
    text = render_html(reports, runs, title=f"neuraldbg report: {args.logdir}", notes=notes, logdir=args.logdir)
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise _UsageError(f"cannot write {args.output}: {e.strerror or e}") from None
    print(f"neuraldbg: wrote {args.output}", file=sys.stderr)
    return _exit_code(reports, args.fail_on)


def _cmd_demo(args) -> int:
    from . import demo_cli  # needs torch; only loaded for this command

    return int(demo_cli.run(args.logdir, not args.no_serve) or 0)


def _warning_printer(default):
    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, NeuralDbgDataWarning):
            # Data warnings are for the user, not a developer: no file/line noise.
            print(f"neuraldbg: warning: {message}", file=sys.stderr)
        else:
            default(message, category, filename, lineno, file, line)

    return show


def main(argv=None) -> int:
    """Entry point of the ``neuraldbg`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "width", 80) < 40:
        parser.error("--width must be at least 40")
    with warnings.catch_warnings():
        warnings.simplefilter("always", NeuralDbgDataWarning)
        warnings.showwarning = _warning_printer(warnings.showwarning)
        try:
            return args.func(args)
        except _UsageError as e:
            print(f"neuraldbg: error: {e}", file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:
            # `neuraldbg report ... | head`: not an error worth a traceback.
            # Point stdout at devnull so the interpreter's final flush is quiet.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
