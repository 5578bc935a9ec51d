"""Score rule changes on held-out corpora in seconds: record each case's run once, replay it after.

    python benchmarks/heldout_replay.py record benchmarks/heldout/dec07b ... --logs /tmp/heldout_logs
    (change the rules)
    python benchmarks/heldout_replay.py score benchmarks/heldout/dec07b ... --logs /tmp/heldout_logs

``record`` trains every case of each corpus (and each failing case's fixed twin) under a
DebugWriter into ``LOGS/<corpus>/<case>`` (``<case>#twin``), skipping runs already recorded.
``score`` re-diagnoses each stored run with the rules in this tree (``offline.rediagnose``, what
``neuraldbg report --rediagnose`` does) and scores it as ``heldout_score.py`` does, with the same
table. The diagnosis sees the stored rows only: a change of the writer (a new metric) needs the
runs recorded again, and a corpus scored this way is a tuning set, never the held-out figure
(that one is ``heldout_score.py``'s, trained afresh, on a corpus nobody tuned on). On the corpora
it was checked on, the replay gave the scorer's stored answers exactly.
"""

import argparse
import os
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heldout_score as hs  # noqa: E402

_DONE = ".recorded"  # written into a run's logdir once its training exited cleanly


def _runs(directory):
    """(case name, path, twin?) of every run a corpus records."""
    out = []
    for name, path in hs.discover(directory):
        out.append((name, path, False))
        if name.startswith("f"):
            out.append((name, path, True))
    return out


def _logdir(logs, directory, name, twin):
    return os.path.join(logs, os.path.basename(os.path.normpath(directory)), name + ("#twin" if twin else ""))


def record(directories, logs, jobs=1, timeout=600.0):
    """Train every run not recorded yet; returns the runs that failed to train."""
    todo = []
    for d in directories:
        for name, path, twin in _runs(d):
            out = _logdir(logs, d, name, twin)
            if not os.path.exists(os.path.join(out, _DONE)):
                todo.append((name, path, twin, out))

    def one(item):
        name, path, twin, out = item
        os.makedirs(out, exist_ok=True)
        cmd = [sys.executable, path, "--logdir", out] + (["--fixed"] if twin else [])
        p = subprocess.run(cmd, env=hs._env(), capture_output=True, text=True, timeout=timeout)
        if p.returncode == 0:
            open(os.path.join(out, _DONE), "w").close()
        print(f"  {name}{' (twin)' if twin else ''}: {'recorded' if p.returncode == 0 else 'FAILED'}",
              file=sys.stderr, flush=True)
        return None if p.returncode == 0 else name

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return [n for n in pool.map(one, todo) if n]


def _report(logdir):
    """The report dict of one stored run, re-diagnosed by the rules in this tree (None: not recorded)."""
    from tb_neuraldbg.offline.reader import read_logdir
    from tb_neuraldbg.offline.rediagnose import diagnose_run

    if not os.path.exists(os.path.join(logdir, _DONE)):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"runs": [diagnose_run(run).to_report() for run in read_logdir(logdir, [])]}


def score(directory, logs):
    """(names, results, totals) of one corpus from its recorded runs."""
    names, results = [], []
    for name, path in hs.discover(directory):
        truth = hs.load_truth(path)
        rep = _report(_logdir(logs, directory, name, False))
        result = hs.score_case(truth, rep, None if rep is not None else "not recorded")
        if not truth.get("healthy"):
            twin = _report(_logdir(logs, directory, name, True))
            if twin is not None:
                result["twin"] = hs.score_case({"healthy": True}, twin)
        names.append(name)
        results.append(result)
    return names, results, hs.totals(results)


def main(argv=None):
    """Command line: ``record`` or ``score`` corpora against a folder of recorded runs."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=("record", "score"))
    ap.add_argument("directories", nargs="+")
    ap.add_argument("--logs", required=True, help="where the runs are recorded (a folder outside the repo)")
    ap.add_argument("--jobs", type=int, default=1, help="runs trained at once (record; 1 or 2 on a shared CPU)")
    args = ap.parse_args(argv)
    if args.command == "record":
        failed = record(args.directories, args.logs, args.jobs)
        print(f"recorded; failed to train: {', '.join(failed) if failed else 'none'}")
        return 1 if failed else 0
    for d in args.directories:
        names, results, total = score(d, args.logs)
        print(f"== {d}")
        print(hs.format_table(names, results, total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
