"""Re-run the diagnosis engine offline over the statistics stored in a logdir.

``diagnose(logdir)`` reads every run with the reader and replays its stored
per-step rows through a fresh ``Engine``, exactly as the writer's worker did
online (same row order, the layer list growing at the step it grew). Use it
to re-diagnose old logs with new thresholds or a newer engine.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..diagnosis.engine import Engine
from ..diagnosis.thresholds import Thresholds
from ..format import metadata
from ..format.contract import NeuralDbgDataWarning, run_report

__all__ = ["RunDiagnosis", "diagnose", "diagnose_run"]


@dataclass(eq=False)
class RunDiagnosis:
    """The engine's verdict on one run.

    ``events`` in the order the engine emitted them (``finish()``'s last);
    ``states`` uint8 [S, L]: the engine's state codes after each logged step
    (rows of layers not yet born stay ``metadata.STATE_UNKNOWN``).
    """

    run: str
    status: str
    root_cause: dict | None
    events: list = field(default_factory=list)
    states: np.ndarray | None = None

    def to_report(self) -> dict:
        """This run as DESIGN.md's report JSON (see ``report.run_report``)."""
        return run_report(
            self.run,
            {"status": self.status, "root_cause": self.root_cause},
            [e.to_dict() for e in self.events],
        )


def _thresholds_from_config(run) -> Thresholds | None:
    """The thresholds the writer used online, if it stored them in its config."""
    stored = (run.config or {}).get("thresholds")
    if not isinstance(stored, dict):
        return None
    known = {f.name for f in dataclasses.fields(Thresholds)}
    try:
        return Thresholds(**{k: v for k, v in stored.items() if k in known})
    except (TypeError, ValueError) as e:
        warnings.warn(
            f"run {run.name!r}: stored thresholds unusable ({e}); using defaults",
            NeuralDbgDataWarning,
            stacklevel=3,
        )
        return None


def _num_classes(run) -> int | None:
    value = (run.config or {}).get("num_classes")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else None


def _grad_clip(run):
    """The run's gradient clipping, if its config says (see Engine's
    ``grad_clip``): a max norm, or False/0 for a run that does not clip."""
    value = (run.config or {}).get("grad_clip")
    return value if isinstance(value, (bool, int, float)) else None


def diagnose_run(run, thresholds: Thresholds | None = None) -> RunDiagnosis:
    """Replay one ``reader.Run`` through a fresh Engine.

    The engine sees the stored rows only: where the writer stored a subset of
    the steps it analysed (long runs, see docs/FORMAT.md), the result may
    differ from the diagnosis made online. ``thresholds`` default to those stored in the run's config (what the
    writer used online), else the engine's defaults.
    """
    if thresholds is None:
        thresholds = _thresholds_from_config(run)
    counts = run.layer_counts
    current = int(counts[0]) if len(counts) else len(run.layers)
    engine = Engine(run.layers[:current], thresholds=thresholds, num_classes=_num_classes(run))
    engine.grad_clip = _grad_clip(run)
    states = np.full(run.states.shape, metadata.STATE_UNKNOWN, dtype=np.uint8)
    for i, step in enumerate(run.steps):
        if counts[i] > current:
            engine.add_layers(run.layers[current : int(counts[i])])
            current = int(counts[i])
        # The engine's layer list only grows: a shorter stored row is NaN-padded
        # (the reader already did that) rather than shrinking it.
        engine.update(int(step), run.stats[i, :current])
        states[i, :current] = engine.states
    finished = engine.finish()
    events = list(engine.events)
    events += [e for e in finished if not any(e is x for x in events)]
    root_cause = dict(engine.root_cause) if engine.root_cause else None
    return RunDiagnosis(
        run=run.name, status=engine.status, root_cause=root_cause, events=events, states=states
    )


def diagnose(logdir, thresholds: Thresholds | None = None) -> list[RunDiagnosis]:
    """Re-diagnose every run of ``logdir`` from its stored statistics.

    Returns one ``RunDiagnosis`` per run with neuraldbg data, sorted by run
    name (TensorBoard's names). ``thresholds`` override the stored ones.
    """
    from .reader import read_logdir

    return [diagnose_run(run, thresholds) for run in read_logdir(logdir)]
