"""Run the whole zoo (every architecture x {healthy, lr, nan, dead}) and
print a table: right/wrong and what the report said. For re-running after
the diagnosis changes:

    PYTHONPATH=. python tests/zoo/probe.py [--arch gpt2 --arch bert] [--fault lr]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.zoo.expect import judge, names_the_rate, said  # noqa: E402
from tests.zoo.faults import FAULTS, unreal  # noqa: E402
from tests.zoo.models import ARCHS, by_name  # noqa: E402
from tests.zoo.run import AT, train  # noqa: E402


def main(argv=None) -> int:
    """Print the table; exit 1 when any case is wrong."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", action="append", help="only these architectures (repeatable)")
    p.add_argument("--fault", action="append", choices=FAULTS, help="only these faults (repeatable)")
    p.add_argument("--messages", action="store_true", help="print the root cause's message under each row")
    args = p.parse_args(argv)
    logging.getLogger("tb_neuraldbg").setLevel(logging.CRITICAL)  # the table says it, not the live log
    archs = [by_name(n) for n in args.arch] if args.arch else ARCHS
    faults = args.fault or list(FAULTS)
    wrong = 0
    print(f"planted at step {AT}")
    print(f"{'arch':<10} {'fault':<8} {'result':<6} {'secs':>5}  report said")
    for arch in archs:
        for fault in faults:
            t0 = time.perf_counter()
            with tempfile.TemporaryDirectory() as logdir:
                outcome = train(arch, fault, logdir)
            report = outcome.report
            problem = unreal(arch, fault, AT, outcome)
            problem = f"NOT PLANTED: {problem}; " if problem else ""
            ok = judge(arch, fault, AT, report) and not problem
            if fault == "lr" and not names_the_rate(report):
                problem += "message does not name the rate; "
            wrong += not ok
            print(f"{arch.name:<10} {fault:<8} {'right' if ok else 'WRONG':<6} {time.perf_counter() - t0:5.1f}  "
                  f"{problem}{said(report)}", flush=True)
            if args.messages and report["root_cause"] is not None:
                print(f"{'':<10} {'':<8} {report['root_cause']['message']}", flush=True)
    print(f"{wrong} wrong of {len(archs) * len(faults)}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
