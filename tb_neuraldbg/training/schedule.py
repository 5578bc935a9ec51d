"""The settings of ``DebugWriter.watch`` and the schedules they define.

:class:`WatchConfig` is where the settings are declared, once: ``watch()``
builds it from its keyword arguments (:meth:`WatchConfig.from_arguments`),
its docstring lists the fields' documentation (:func:`knobs_doc`), and the
run's stored config JSON is the dataclass itself plus the facts of the run
(:meth:`WatchConfig.to_json`).
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from dataclasses import dataclass
from typing import Any, Mapping

from .._version import __version__
from ..format import metadata

__all__ = ["WatchConfig", "knobs_doc", "ANALYSIS_MODES", "NONFINITE_MODES"]

_KNOBS_MARK = "Knobs:"
#: The ways of ``watch(nonfinite=...)``: see :class:`WatchConfig`.
NONFINITE_MODES = ("replay", "every_step")
#: Where ``watch(analysis=...)`` analyses the steps: see :class:`WatchConfig`.
ANALYSIS_MODES = ("thread", "process")


@dataclass
class WatchConfig:
    """The knobs of ``DebugWriter.watch`` and the schedules they define.

    Knobs:
    include, exclude: which modules are rows: fnmatch name patterns
        (``"encoder.layers.*"``) or module types; with ``include`` only the
        matching ones, then ``exclude`` removes some.
    max_layers: at most this many module rows, evenly spaced (None, the
        default: every module, even in a model of thousands).
    stats_every: full activation statistics (mean, std, max |x|, zero/dead/
        saturated fractions, non-finite flags of every module) and weight
        norms every this many steps, and at every step below
        ``stats_every`` (a model born broken shows at step 0). Gradient
        norms, the batch's mean/std/max |x|, loss, learning rate and scale
        are measured at every step.
    nonfinite: how non-finite values are found at the step they appear.
        "replay" (the default): every step checks what is computed anyway
        (gradient norms, loss, the batch; on full steps every statistic);
        a step where one is NaN/inf is run again on its kept batch, before
        the optimizer uses its gradients, with every module's outputs,
        inputs and output gradients counted, then everything the re-run
        touched (RNG, buffers, autocast) is put back. "every_step": every
        module's non-finite flags at every step (as a sum of each output
        and output gradient, a pass over each), exact counts from the step
        after the first non-finite one; also what "replay" falls back to,
        with a warning, when a step cannot be replayed.
    update_every: update ratios ||w_t - w_{t-1}|| / ||w_{t-1}|| every this
        many steps and at every step below ``stats_every``: each one costs a
        transient copy of the weights, so it is rarer than the other
        statistics (0 = never, e.g. for a model that barely fits in memory).
    hist_every: activation histograms every this many steps (0 = never),
        thinned with the write stride (see ``hist_interval``).
    full_steps: every step is written below this step; above it the write
        stride doubles with each doubling of the step (``stride``; the
        schedule is in docs/FORMAT.md).
    ring: rows kept on the worker before they are written or dropped: the
        ``ring`` steps before and after an event are always written.
    on_error: "warn", or "raise": raise ``TrainingFailure`` in the training
        thread (at the next hook) after an error-level event: the worker
        analyses steps in bursts, so up to 8 steps after the step of the
        event (``flush()`` analyses everything queued).
    thresholds: passed to the diagnosis Engine
        (``tb_neuraldbg.diagnosis.Thresholds``).
    start_step: the step of the first record (e.g. when resuming); by
        default the DebugWriter's ``purge_step``, else 0.
    save_batches: save the batch behind a data anomaly or the first
        non-finite event into the run directory as .npz.
    analysis: where the rows, the diagnosis and the summaries are made:
        "thread" (the default: a background thread of the training
        process) or "process" (a child process, fed one message a step,
        whose events come back into this run's event file; POSIX). Where a
        step is bound by Python (a small model, often on a GPU) the
        thread's Python holds the GIL that training needs, the child's
        does not (docs/performance.md). The child imports numpy, not
        torch; it takes a moment to start, so on_error="raise" may raise
        later after an event in the first steps. A distributed
        run, or a machine where the child cannot start, uses the thread
        (with a warning).
    layer_scalars_every: also write each module row's gradient norm (and
        its update ratio, at the steps that measure it) as ordinary
        TensorBoard scalars, ``neuraldbg_grad_norm/<layer>`` and
        ``neuraldbg_update_ratio/<layer>``, at the written steps that are
        a multiple of this (0, the default: never): the Scalars and Time
        Series dashboards then smooth, overlay and compare runs. It costs
        event-file size (README.md, docs/performance.md).
    grad_clip: the max norm the training loop clips the gradients to
        (``clip_grad_norm_``'s ``max_norm``), 0 when it does not clip, None
        (the default) when unknown. A run that clips is not advised to clip
        (the framework callbacks fill it in from the Trainer's settings).
    """

    include: Any = None
    exclude: Any = None
    max_layers: int | None = None
    stats_every: int = 10
    update_every: int = 100
    hist_every: int = 100
    full_steps: int = 2000
    ring: int = 32
    on_error: str = "warn"
    thresholds: Any = None
    start_step: int | None = None
    save_batches: bool = True
    nonfinite: str = "replay"
    analysis: str = "thread"
    layer_scalars_every: int = 0
    grad_clip: float | None = None

    def __post_init__(self):
        if self.start_step is None:  # (watch() puts the writer's purge_step here first)
            self.start_step = 0
        for name in ("stats_every", "full_steps", "ring"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        for name in ("update_every", "hist_every", "layer_scalars_every"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an int >= 0 (0 = never), got {v!r}")
        if self.on_error not in ("warn", "raise"):
            raise ValueError(f"on_error must be 'warn' or 'raise', got {self.on_error!r}")
        if self.nonfinite not in NONFINITE_MODES:
            raise ValueError(f"nonfinite must be one of {NONFINITE_MODES}, got {self.nonfinite!r}")
        if self.analysis not in ANALYSIS_MODES:
            raise ValueError(f"analysis must be one of {ANALYSIS_MODES}, got {self.analysis!r}")
        if self.grad_clip is not None:
            if isinstance(self.grad_clip, bool) or not isinstance(self.grad_clip, (int, float)) or not (
                    self.grad_clip >= 0):
                raise ValueError(f"grad_clip must be a number >= 0 (0: no clipping) or None, got {self.grad_clip!r}")
            self.grad_clip = float(self.grad_clip)
        if self.max_layers is not None and self.max_layers < 1:
            raise ValueError(f"max_layers must be >= 1 or None, got {self.max_layers!r}")

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> "WatchConfig":
        """The config from a function's arguments (``watch()``'s
        ``locals()``): every field is taken from there, other names are
        ignored."""
        return cls(**{f.name: arguments[f.name] for f in dataclasses.fields(cls)})

    def to_json(self, **run_facts) -> dict:
        """The run's stored config (``neuraldbg/config``): the versions,
        every field (made JSON-safe: types by name, non-finite floats as
        None), then ``run_facts`` (optimizer class, scaler, num_classes)."""
        import torch  # (not at the top: a worker process's child reads the config without torch)

        return {
            "format_version": metadata.FORMAT_VERSION,
            "tb_neuraldbg": __version__,
            "torch": torch.__version__,
            **_jsonable(dataclasses.asdict(self)),
            **_jsonable(run_facts),
        }

    # -- schedules --------------------------------------------------------

    def is_stats(self, step: int) -> bool:
        return step < self.stats_every or step % self.stats_every == 0

    def is_update(self, step: int) -> bool:
        return self.update_every > 0 and (step < self.stats_every or step % self.update_every == 0)

    def _octave(self, step: int) -> int:
        return 0 if step < 2 * self.full_steps else int(math.log2(step / self.full_steps))

    def stride(self, step: int) -> int:
        """Write stride at ``step``: 1 below ``full_steps``, then
        ``stats_every * 2**k`` for steps in ``[2**k, 2**(k+1)) * full_steps``:
        ``full_steps / stats_every`` rows per doubling, all of them full
        statistics steps."""
        if step < self.full_steps:
            return 1
        return self.stats_every * (1 << self._octave(step))

    def is_written(self, step: int) -> bool:
        return step % self.stride(step) == 0

    def is_layer_scalars(self, step: int) -> bool:
        """Whether a row written at ``step`` also writes its per-layer scalars."""
        return self.layer_scalars_every > 0 and step % self.layer_scalars_every == 0

    def hist_interval(self, step: int) -> int:
        return self.hist_every * (1 << self._octave(step)) if step >= self.full_steps else self.hist_every

    def is_hist(self, step: int) -> bool:
        return self.hist_every > 0 and step % self.hist_interval(step) == 0


def knobs_doc(indent: str = "") -> str:
    """The documentation of every knob (the "Knobs:" part of
    :class:`WatchConfig`'s docstring), each line indented by ``indent``: for
    ``watch()``'s own docstring."""
    doc = WatchConfig.__doc__ or ""  # None under python -OO
    _, _, knobs = doc.partition(_KNOBS_MARK)
    return textwrap.indent(textwrap.dedent(knobs).strip("\n"), indent)


def _jsonable(x):
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(x).items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, type):
        return x.__name__
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return str(x)
