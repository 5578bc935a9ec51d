"""Diagnosis engine: per-layer states, transition events, root cause.

Pure numpy (no torch import), so it runs online on the writer's worker thread
and offline over stored statistics alike::

    from tb_neuraldbg.diagnosis import Engine, Thresholds, Event
    engine = Engine(layers)                 # [{"name", "type"}, ...] in row order
    events = engine.update(step, row)       # row: float32 [L, len(METRICS)]
    engine.finish()                         # events only decidable at the end

No I/O here: ``tb_neuraldbg.diagnose(logdir)`` (an offline re-run over a
logdir) lives in ``tb_neuraldbg.offline.rediagnose``.
"""

from .engine import Engine
from .events import Event
from .thresholds import Thresholds

__all__ = ["Engine", "Event", "Thresholds"]

