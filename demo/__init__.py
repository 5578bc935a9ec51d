"""Runnable failure scenarios and a healthy control (installed as tb_neuraldbg._demo).

Each scenario module trains a tiny model on CPU in a few seconds, with the
ordinary DebugWriter + watch() + training loop a user would write, into its
own run directory LOGDIR/<NAME>. Every module has:

    NAME      the run (subdirectory) name
    STEPS     default number of training steps
    EXPECTED  the planted root cause, {"kind": ..., "layer": ...}, or None
              for the healthy control
    run(logdir, steps=STEPS, seed=0, progress=None) -> str  (the run directory)

and may have ``unsupported() -> str | None``: why it cannot run with the
installed torch (``neuraldbg demo`` then skips it).

and runs as a script: ``python demo/<name>.py --logdir DIR``.

Every scenario creates its DebugWriter and calls watch() itself, on purpose:
each file is an example to read or copy. healthy.py, the shortest complete
example, also spells out the ordinary training loop (amp_scaler.py its
GradScaler variant); the others train with that same loop from _common.py,
which holds everything that says nothing about the writer (synthetic data,
the MLP, the loop, run directories, the command line).
"""

import importlib

__all__ = ["SCENARIOS", "load"]

# Order of the runs in `neuraldbg demo` (the healthy control first).
SCENARIOS = (
    "healthy",
    "vanishing",
    "exploding",
    "nan_op",
    "dead_relu",
    "bad_batch",
    "amp_scaler",
)


def load(name: str):
    """The scenario module called `name` (one of SCENARIOS)."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    return importlib.import_module(f"{__name__}.{name}")
