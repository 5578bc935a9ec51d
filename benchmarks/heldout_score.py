"""Score the diagnosis on a held-out corpus of training cases (benchmarks/heldout/<set>/).

    python benchmarks/heldout_score.py benchmarks/heldout/dec07 [--only NAME,...] [--json OUT]
                                       [--jobs N] [--truth] [--twins] [--timeout S]

Each case file (``f*.py`` failing, ``h*.py`` healthy; see benchmarks/heldout/case_plumbing.py) is
trained in a subprocess under a DebugWriter in a temporary logdir, and ``neuraldbg report --json``
is read back. A failing case is *fully right* when the root cause's kind, layer and step all match
its truth record; kind-right, layer-right and silent (no root cause) are counted apart. A healthy
case is a *false alarm* when the run is failing or has an error-level event; warnings are counted
apart. A case that crashes or times out is a miss, with its reason. ``--truth`` also runs each
case's own check (bug against its fixed twin, on raw statistics, without the writer); ``--twins``
trains each failing case's fixed twin under the writer too, where any alarm is a false one.

The scoring functions take plain dicts and do no training (tests/test_heldout_scorer.py).
"""

import argparse
import fnmatch
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

__all__ = ["discover", "load_truth", "score_case", "score_failing", "score_healthy", "score_crash",
           "totals", "format_table", "main"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def discover(directory, only=None):
    """The case files of ``directory`` as (name, path), sorted; ``only`` keeps those names."""
    names = sorted(f[:-3] for f in os.listdir(directory)
                   if f.endswith(".py") and f[:1] in ("f", "h") and not f.startswith("_"))
    if only:
        wanted = set(only)
        missing = wanted - set(names)
        if missing:
            raise ValueError(f"no such case: {', '.join(sorted(missing))}")
        names = [n for n in names if n in wanted]
    return [(n, os.path.join(directory, n + ".py")) for n in names]


def load_truth(path):
    """The ``CASE`` record of one case file, with ``healthy`` filled in from its name."""
    spec = importlib.util.spec_from_file_location("heldout_case_" + os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    truth = dict(module.CASE)
    truth.setdefault("healthy", os.path.basename(path).startswith("h"))
    return truth


def _layer_right(layer, patterns):
    return any(fnmatch.fnmatchcase(layer, p) for p in patterns)


def score_failing(truth, run):
    """Score one failing case's report run (a dict of the report's ``runs``) against its truth."""
    root = run.get("root_cause")
    out = {"healthy_case": False, "crashed": False, "status": run.get("status"), "silent": root is None,
           "found": None if root is None else {k: root.get(k) for k in ("kind", "layer", "step")}}
    if root is None:
        out.update(kind_right=False, layer_right=False, step_right=False, fully_right=False)
        return out
    lo, hi = truth["step"]
    out["kind_right"] = root.get("kind") in truth["kind"]
    out["layer_right"] = _layer_right(str(root.get("layer")), truth["layer"])
    out["step_right"] = isinstance(root.get("step"), int) and lo <= root["step"] <= hi
    out["fully_right"] = out["kind_right"] and out["layer_right"] and out["step_right"]
    return out


def score_healthy(run):
    """Score one healthy case's report run: a false alarm is a failing status or an error event."""
    events = run.get("events") or []
    errors = [e for e in events if e.get("severity") == "error"]
    warnings = [e for e in events if e.get("severity") == "warning"]
    false_alarm = run.get("status") == "failing" or bool(errors)
    root = run.get("root_cause")
    return {"healthy_case": True, "crashed": False, "status": run.get("status"),
            "false_alarm": false_alarm, "passed": not false_alarm, "warned": bool(warnings),
            "n_errors": len(errors), "n_warnings": len(warnings),
            "found": None if root is None else {k: root.get(k) for k in ("kind", "layer", "step")}}


def score_crash(truth, reason):
    """A case that crashed, timed out or left no readable report: a miss, with its reason."""
    if truth.get("healthy"):
        return {"healthy_case": True, "crashed": True, "reason": reason, "status": None,
                "false_alarm": False, "passed": False, "warned": False, "found": None}
    return {"healthy_case": False, "crashed": True, "reason": reason, "status": None, "silent": False,
            "kind_right": False, "layer_right": False, "step_right": False, "fully_right": False,
            "found": None}


def score_case(truth, report=None, error=None):
    """Score one case from its parsed report (the whole ``--json`` object) or its error."""
    if error is None:
        runs = (report or {}).get("runs") or []
        if len(runs) != 1:
            error = f"report holds {len(runs)} runs, expected 1"
    if error is not None:
        return score_crash(truth, error)
    run = runs[0]
    return score_healthy(run) if truth.get("healthy") else score_failing(truth, run)


def totals(results):
    """Counts over scored cases (each a dict from score_case)."""
    fail = [r for r in results if not r["healthy_case"]]
    ok = [r for r in results if r["healthy_case"]]
    return {
        "failing_cases": len(fail),
        "fully_right": sum(r["fully_right"] for r in fail),
        "kind_right": sum(r["kind_right"] for r in fail),
        "layer_right": sum(r["layer_right"] for r in fail),
        "step_right": sum(r["step_right"] for r in fail),
        "silent": sum(r.get("silent", False) for r in fail),
        "failing_crashed": sum(r["crashed"] for r in fail),
        "healthy_cases": len(ok),
        "healthy_passed": sum(r["passed"] for r in ok),
        "false_alarms": sum(r["false_alarm"] for r in ok),
        "warned": sum(r["warned"] for r in ok),
        "healthy_crashed": sum(r["crashed"] for r in ok),
        "twins_scored": sum("twin" in r for r in fail),
        "twins_passed": sum(r["twin"]["passed"] for r in fail if "twin" in r),
    }


def _found(r):
    f = r.get("found")
    return "-" if not f else f"{f['kind']} @ {f['layer']} step {f['step']}"


def format_table(names, results, total):
    """A plain-text table of per-case results and the totals."""
    lines = []
    yn = {True: "yes", False: "no"}
    twins = any("twin" in r for r in results)
    lines.append(f"{'failing case':44} {'full':5} {'kind':5} {'layer':5} {'step':5}  found"
                 + ("  | fixed twin" if twins else ""))
    for n, r in zip(names, results):
        if r["healthy_case"]:
            continue
        if r["crashed"]:
            lines.append(f"{n:44} CRASH  {r['reason']}")
            continue
        row = (f"{n:44} {yn[r['fully_right']]:5} {yn[r['kind_right']]:5} {yn[r['layer_right']]:5} "
               f"{yn[r['step_right']]:5}  {'silent' if r['silent'] else _found(r)}")
        if "twin" in r:
            tw = r["twin"]
            row += "  | " + ("crash" if tw["crashed"] else "healthy" if tw["passed"] else "ALARM " + _found(tw))
        lines.append(row)
    lines.append("")
    lines.append(f"{'healthy case':44} {'pass':5} {'warn':5}  found")
    for n, r in zip(names, results):
        if not r["healthy_case"]:
            continue
        if r["crashed"]:
            lines.append(f"{n:44} CRASH  {r['reason']}")
            continue
        lines.append(f"{n:44} {yn[r['passed']]:5} {yn[r['warned']]:5}  {_found(r)}")
    t = total
    lines.append("")
    lines.append(f"failing: fully right {t['fully_right']}/{t['failing_cases']}, kind right {t['kind_right']}, "
                 f"layer right {t['layer_right']}, step right {t['step_right']}, silent {t['silent']}, "
                 f"crashed {t['failing_crashed']}")
    lines.append(f"healthy: passed {t['healthy_passed']}/{t['healthy_cases']}, false alarms {t['false_alarms']}, "
                 f"warned {t['warned']}, crashed {t['healthy_crashed']}")
    if t.get("twins_scored"):
        lines.append(f"fixed twins of the failing cases: healthy {t['twins_passed']}/{t['twins_scored']}")
    return "\n".join(lines)


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _last_line(text):
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


def run_case(path, timeout, fixed=False):
    """Train one case (its fixed twin with ``fixed``) under the writer in a temp logdir.

    Returns (report dict | None, error | None).
    """
    with tempfile.TemporaryDirectory(prefix="heldout_") as logdir:
        cmd = [sys.executable, path, "--logdir", logdir] + (["--fixed"] if fixed else [])
        try:
            proc = subprocess.run(cmd, env=_env(), timeout=timeout, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            return None, f"training timed out after {timeout}s"
        if proc.returncode != 0:
            return None, f"training exited {proc.returncode}: {_last_line(proc.stderr)}"
        try:
            rep = subprocess.run([sys.executable, "-m", "tb_neuraldbg.cli", "report", logdir, "--json"],
                                 env=_env(), timeout=timeout, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            return None, f"report timed out after {timeout}s"
        if rep.returncode != 0:
            return None, f"report exited {rep.returncode}: {_last_line(rep.stderr or rep.stdout)}"
        try:
            return json.loads(rep.stdout), None
        except ValueError as exc:
            return None, f"report is not JSON: {exc}"


def run_truth(path, timeout):
    """Run one case's own truth check (bug vs fixed twin, raw statistics); returns a dict."""
    try:
        proc = subprocess.run([sys.executable, path, "--truth"], env=_env(), timeout=timeout,
                              capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return {"held": False, "detail": f"timed out after {timeout}s"}
    if proc.returncode != 0:
        return {"held": False, "detail": f"exited {proc.returncode}: {_last_line(proc.stderr)}"}
    try:
        return json.loads(_last_line(proc.stdout))
    except ValueError:
        return {"held": False, "detail": "no JSON verdict: " + _last_line(proc.stdout)}


def _one(item, timeout, with_truth, with_twins=False):
    name, path = item
    try:
        truth = load_truth(path)
    except (Exception, SystemExit) as exc:  # a broken case file is a miss like any crash
        return {"healthy_case": name.startswith("h"), "crashed": True, "reason": f"cannot load: {exc!r}",
                **({"passed": False, "false_alarm": False, "warned": False} if name.startswith("h") else
                   {"fully_right": False, "kind_right": False, "layer_right": False, "step_right": False,
                    "silent": False})}
    report, error = run_case(path, timeout)
    result = score_case(truth, report, error)
    result["truth"] = {k: truth.get(k) for k in ("kind", "layer", "step", "source", "bug", "arch", "fools")
                       if truth.get(k) is not None}
    if with_truth:
        result["truth_check"] = run_truth(path, timeout)
    if with_twins and not truth.get("healthy"):
        twin_report, twin_error = run_case(path, timeout, fixed=True)
        result["twin"] = score_case({"healthy": True}, twin_report, twin_error)
    print(f"  {name}: {'crash: ' + result['reason'] if result['crashed'] else _found(result)}",
          file=sys.stderr, flush=True)
    return result


def main(argv=None):
    """Command line: score every case of a directory and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory")
    ap.add_argument("--only", help="comma-separated case names (file names without .py)")
    ap.add_argument("--json", help="write every per-case result and the totals here")
    ap.add_argument("--jobs", type=int, default=1, help="cases trained at once (1 or 2 on a shared CPU)")
    ap.add_argument("--truth", action="store_true", help="also run each case's bug-vs-twin truth check")
    ap.add_argument("--twins", action="store_true",
                    help="also train each failing case's fixed twin under the writer: it should be healthy")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per subprocess")
    args = ap.parse_args(argv)
    cases = discover(args.directory, args.only.split(",") if args.only else None)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda c: _one(c, args.timeout, args.truth, args.twins), cases))
    names = [n for n, _ in cases]
    total = totals(results)
    print(format_table(names, results, total))
    if args.truth:
        held = [n for n, r in zip(names, results) if r["truth_check"]["held"]]
        print(f"truth checks held: {len(held)}/{len(names)}")
        for n, r in zip(names, results):
            print(f"  {n}: {'held' if r['truth_check']['held'] else 'NOT held'} - {r['truth_check']['detail']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"directory": os.path.relpath(args.directory, ROOT), "totals": total,
                       "cases": dict(zip(names, results))}, f, indent=1, sort_keys=True)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
