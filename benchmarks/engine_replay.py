"""The diagnosis engine alone, on the rows of every scenario run: its cost a
step, and a digest that tells whether a change of the engine changed what it
says.

The engine runs on the writer's worker at every step (about 0.4 ms of a small
model's step, more with many rows: docs/cost-history.md). To change it for speed
without changing a single event, record the scenario corpus's rows once,
digest them with the code before and after, and compare:

    python benchmarks/engine_replay.py record /tmp/rows    # trains tests/scenarios' runs (~2 min)
    python benchmarks/engine_replay.py digest /tmp/rows > before.txt
    (change the engine)
    python benchmarks/engine_replay.py digest /tmp/rows | diff before.txt -
    python benchmarks/engine_replay.py time /tmp/rows      # us a step, with an A/A repeat

``record`` trains every case of tests/scenarios (planted failures, the
corpus of realistic bugs, the healthy controls) under the real writer and
keeps the rows its engine saw (numpy ``.npz``, loaded without pickle) and
the layers (``.json``). ``digest`` replays each run's rows into a fresh
``Engine`` and prints, per run, a hash of the events of every step, the
states after every step, the events of ``finish()`` and the root cause.
``time`` replays them all twice, interleaved run by run, and prints the
engine's time a step in each pass (the two passes' difference is the noise).
"""

from __future__ import annotations

import os

os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # before torch is imported (record)

import argparse  # noqa: E402
import contextlib  # noqa: E402
import glob  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests")


def record(out: str, only: list[str]) -> None:
    """Train the scenario runs; keep each one's rows and layers in ``out``."""
    sys.path.insert(0, TESTS)
    from scenarios import corpus_failures, corpus_healthy, failures, healthy
    from scenarios.harness import train

    os.makedirs(out, exist_ok=True)
    specs = ([c.spec for c in failures.all_cases() + corpus_failures.all_cases()]
             + healthy.all_specs() + corpus_healthy.all_specs())
    for spec in specs:
        if only and spec.name not in only:
            continue
        with tempfile.TemporaryDirectory() as logdir, _quiet():
            r = train(spec, logdir)
        steps = np.array([s for s, _ in r.rows], dtype=np.int64)
        np.savez_compressed(os.path.join(out, f"{spec.name}.npz"), steps=steps,
                            **{f"r{i}": row for i, (_, row) in enumerate(r.rows)})
        with open(os.path.join(out, f"{spec.name}.json"), "w") as f:
            json.dump({"layers": r.layers, "num_classes": r.engine.num_classes}, f)
        print(f"{spec.name}: {len(steps)} steps, {len(r.engine.events)} events", flush=True)


@contextlib.contextmanager
def _quiet():
    """No log line nor warning (the planted failures' error lines) while a
    scenario trains; the process's settings back afterwards."""
    before = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(before)


def _runs(folder: str):
    """(name, layers, num_classes, steps, rows) of each recorded run."""
    paths = sorted(glob.glob(os.path.join(folder, "*.npz")))
    if not paths:
        sys.exit(f"no recorded run in {folder}: run `record {folder}` first")
    for path in paths:
        name = os.path.basename(path)[: -len(".npz")]
        with open(os.path.join(folder, f"{name}.json")) as f:
            meta = json.load(f)
        with np.load(path, allow_pickle=False) as z:
            steps = z["steps"]
            rows = [z[f"r{i}"] for i in range(len(steps))]
        yield name, meta["layers"], meta["num_classes"], steps, rows


def _replay(layers, num_classes, steps, rows, digest=None):
    """A fresh Engine fed the rows (layers added as the rows grow, as the
    worker does); ``digest`` (a hash) gets every step's events and states.
    Returns (engine, seconds in update)."""
    from tb_neuraldbg.diagnosis import Engine

    first = rows[0].shape[0] if rows else len(layers)
    eng = Engine(layers[:first], num_classes=num_classes)
    spent = 0.0
    for step, row in zip(steps, rows):
        if row.shape[0] > len(eng.layers):
            eng.add_layers(layers[len(eng.layers): row.shape[0]])
        t = time.perf_counter()
        events = eng.update(int(step), row)
        spent += time.perf_counter() - t
        if digest is not None:
            digest.update(_text([e.to_dict() for e in events]))
            digest.update(eng.states.tobytes())
    return eng, spent


def _text(value) -> bytes:
    return json.dumps(value, sort_keys=True, default=repr).encode()


def digest(folder: str) -> None:
    """Print one line a run: its steps, events and the hash of everything
    the engine said."""
    for name, layers, k, steps, rows in _runs(folder):
        h = hashlib.sha256()
        eng, _ = _replay(layers, k, steps, rows, h)
        h.update(_text([e.to_dict() for e in eng.finish()]))
        h.update(_text(eng.root_cause))
        print(f"{name} {len(steps)} steps {len(eng.events)} events {h.hexdigest()[:20]}")


def timing(folder: str) -> None:
    """The engine's time a step over every run, two passes interleaved."""
    runs = list(_runs(folder))
    spent, n = [0.0, 0.0], 0
    for _, layers, k, steps, rows in runs:
        for p in range(2):
            spent[p] += _replay(layers, k, steps, rows)[1]
        n += len(steps)
    a, b = (1e6 * s / n for s in spent)
    print(f"{len(runs)} runs, {n} steps: engine {a:.1f} us a step (A/A repeat {b:.1f} us)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("record", "digest", "time"))
    p.add_argument("folder")
    p.add_argument("only", nargs="*", help="record: only these scenarios (names)")
    args = p.parse_args()
    if args.what == "record":
        record(args.folder, args.only)
    elif args.what == "digest":
        digest(args.folder)
    else:
        timing(args.folder)


if __name__ == "__main__":
    main()
