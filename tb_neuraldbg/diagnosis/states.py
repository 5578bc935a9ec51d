"""Classification of one statistics row into raw per-layer states.

``Classifier.classify(step, row, confirmed)`` returns, for every hysteresis
*aspect* of a layer, the raw state code of each row at this step
(``UNMEASURED`` where the statistics are NaN). Each aspect lives in its own
file under ``aspects/`` with its own state: the gradient (healthy / vanishing
/ exploding / nonfinite / no_gradient), the activation (``fwd``: nonfinite;
``act``: dead / saturated / collapsed / act_exploding), the weight (frozen),
and the pseudo-layers ``<input>`` (data_anomaly), ``<loss>`` (``loss``:
nonfinite / loss_spike; ``plateau``; ``init``: initial_loss) and
``<optimizer>`` (``scaler``: scaler_collapse; ``accum``: gradients that
accumulate across steps, reported as exploding).

Evidence is relative wherever possible (see ``Thresholds``): a layer against
its own running history (exponential averages of log-magnitudes, fed only by
healthy values so a failure does not drag its own reference) and against the
other layers at the same step. Everything is vectorised over layers; the
per-step cost is a few dozen numpy operations on [L] arrays.

The classifier is the loop over the aspects: it runs them in the order their
inputs need, passing each the values it needs from the others, and routes
the engine's questions (the extra fields of an event, its evidence) to the
aspect that owns them. ``facts()`` is the read-only summary of the run that
the root cause needs.
"""

from __future__ import annotations

import numpy as np

from .aspects import Activation, Gain, Gradient, Input, Loss, Optimizer, RowKinds, Samples, Units, Weight
from .rootcause import RunFacts
from .thresholds import Thresholds

__all__ = ["Classifier", "ASPECTS", "EVIDENCE", "FINAL", "RowKinds"]

_ASPECT_TYPES = (Gradient, Activation, Weight, Input, Loss, Optimizer, Gain, Units, Samples)
#: hysteresis aspect -> (default evidence metric, metric of its non-finite
#: state or None), in the order the classifier returns them
EVIDENCE = {name: ev for a in _ASPECT_TYPES for name, ev in a.EVIDENCE.items()}
#: aspects of a layer, each with its own hysteresis
ASPECTS = tuple(EVIDENCE)
#: aspects decided only at a run's end (Classifier.final): one decision confirms them
FINAL = tuple(name for a in _ASPECT_TYPES for name in a.FINAL)


class Classifier:
    """Raw per-layer states of each step, from one object per aspect."""

    def __init__(self, layers, thresholds: Thresholds, num_classes: int | None = None):
        self.t = thresholds
        self.kinds = RowKinds(layers)
        self.gradient = Gradient(thresholds)
        self.activation = Activation(thresholds)
        self.weight = Weight(thresholds)
        self.input = Input(thresholds)
        self.loss = Loss(thresholds, num_classes)
        self.optimizer = Optimizer(thresholds)
        self.gain = Gain(thresholds)
        self.units = Units(thresholds)
        self.samples = Samples(thresholds)
        self._aspects = (self.gradient, self.activation, self.weight, self.input, self.loss, self.optimizer,
                         self.gain, self.units, self.samples)
        # the aspect object behind each hysteresis aspect
        self._owner = {name: a for a in self._aspects for name in a.EVIDENCE}
        self.grow(layers)

    @property
    def num_classes(self) -> int | None:
        """K of a K-class cross-entropy (None: unknown), for the loss rules."""
        return self.loss.num_classes

    @num_classes.setter
    def num_classes(self, k) -> None:
        self.loss.num_classes = k

    def grow(self, layers) -> None:
        """Extend to the rows of ``layers`` (after add_layers; the list only grows)."""
        self.kinds = RowKinds(layers)
        for a in self._aspects:
            a.grow(self.kinds)

    # ------------------------------------------------------------------ main
    def classify(self, step: int, row: np.ndarray, confirmed: dict) -> dict:
        """Raw states of every aspect: {aspect: (raw int16 [L], onset int [L] | None)}.

        ``row`` is float64 [L, M]; ``confirmed`` maps aspect -> the confirmed
        codes (exit thresholds differ from entry ones: hysteresis on values).
        The keys come in ``ASPECTS`` order (events of one step keep it).
        """
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # the optimizer first: whether the step was skipped and at which
            # rate tells the others what to expect
            rate = self.optimizer.observe(step, row)
            # (the activations as of their last measurement: a dead layer
            # explains the zero gradients before it)
            out = self.gradient.classify(step, row, confirmed["grad"], rate.scaler_active,
                                         self.activation.blocked_rows)
            # (the loss as of the previous step: this step's is judged below)
            out.update(self.activation.classify(row, confirmed["act"], self.gradient.has_param,
                                                self.loss.below_first(), step=step))
            out.update(self.weight.classify(step, row, out["grad"][0], rate.lr, rate.skipped))
            out.update(self.input.classify(row))
            self.loss.contested = bool(self.weight.moved_anyway.any())
            out.update(self.loss.classify(step, row, self.optimizer.highest_rate(rate.lr), confirmed["plateau"]))
            out.update(self.optimizer.classify(row))
            out.update(self.gain.classify(row, self.gradient.has_param))
            out.update(self.units.classify(row))
            out.update(self.samples.classify(row, self.gradient.has_param, step, self.loss.fell_clearly(),
                                             self.loss.beats_trivial()))
            if rate.scaler_active:
                self.optimizer.note_origin(self._nonfinite_origin(row), rate.skipped)
        return out

    def _nonfinite_origin(self, row):
        """Where this step's inf/NaN first appear: ("forward", row) of the first
        non-finite output, else ("backward", row) where the gradients turn
        non-finite, else None."""
        i = self.activation.first_nonfinite(row)
        if i is not None:
            return ("forward", i)
        i = self.gradient.origin_row()
        return None if i is None else ("backward", i)

    def final(self, confirmed: dict) -> dict:
        """Raw states only the end of a run decides (the plateau of a run
        shorter than plateau_min_steps, an optimizer that never stepped):
        {aspect: (raw, onset)}, maybe empty."""
        return {**self.loss.final(confirmed["plateau"]), **self.optimizer.final(confirmed["nostep"])}

    # ---------------------------------------------------------------- events
    def event_fields(self, aspect: str, kind: str, tr, row) -> tuple:
        """(value, value_before, extra) of the event of transition ``tr`` of
        ``aspect``, from the aspect that owns it (``row``: the step's row)."""
        return self._owner[aspect].event_fields(aspect, kind, tr, row)

    def evidence(self, aspect: str, code, value, before) -> tuple:
        """The evidence (value, before) [L] of the state codes ``code`` [L]."""
        return self._owner[aspect].evidence(aspect, code, value, before)

    def facts(self) -> RunFacts:
        """The read-only summary of the run that the root cause reads."""
        opt = self.optimizer
        return RunFacts(lr_jumps=tuple(opt.lr_jumps), lr_steps=tuple(opt.lr_steps),
                        high_update_steps=tuple(self.weight.high_update_steps),
                        input_rms0=self.input.rms0, module_rows=self.kinds.module_rows,
                        param_rows=tuple(int(i) for i in np.flatnonzero(self.gradient.has_param)),
                        hyper_changes=tuple(opt.hyper_changes), lr_collapse=opt.lr_collapse,
                        bursts=tuple(self.gradient.bursts), names=tuple(self.kinds.names),
                        first_loss=self.loss.first_loss, loss_improved=self.loss.improved_step,
                        loss_doubled=self.loss.doubled_step, extreme_first=self.weight.extreme_first or (),
                        first_step=self.loss.first_step or 0, input_integers=self.input.integers,
                        input_absmax0=self.input.absmax0, update_peak=self.weight.moves.update_peak(),
                        target_var=self.loss.target_var.median(), blind_rows=self.samples.blind_rows())
