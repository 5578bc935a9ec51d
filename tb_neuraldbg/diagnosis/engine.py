"""The diagnosis engine: rows in, events, states and the root cause out.

The writer calls ``update`` on its worker thread for every training step, so
it is vectorised over layers (see the benchmark in tests/test_diagnosis.py);
``tb_neuraldbg.diagnose`` replays stored rows through the same engine.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..format import metadata
from .events import Event
from .explain import event_message
from .rootcause import Failure, find_root_cause
from .states import ASPECTS, EVIDENCE, FINAL, Classifier
from .thresholds import Thresholds
from .transitions import UNMEASURED, Hysteresis

__all__ = ["Engine", "EVENT_KIND", "persistence"]

_M = metadata.METRIC_INDEX
_S = metadata.STATE_CODE
_NAMES = metadata.STATES
HEALTHY = _S["healthy"]
_NUM_METRICS = len(metadata.METRICS)

#: event kind of each (failing) state, from the state table
EVENT_KIND = {s.name: s.kind for s in metadata.STATE_TABLE if s.kind}


def persistence(t: Thresholds) -> np.ndarray:
    """Measured steps in a row that confirm each state, indexed by state code."""
    persist = np.full(len(_NAMES), t.persist_steps, np.int64)
    persist[HEALTHY] = t.persist_recover
    persist[_S["nonfinite"]] = t.persist_nonfinite
    persist[_S["vanishing"]] = t.persist_vanishing
    persist[_S["frozen"]] = t.frozen_steps
    for s in ("data_anomaly", "initial_loss", "loss_plateau", "scaler_collapse"):
        persist[_S[s]] = 1  # their classifiers already judge over many steps or batches
    return persist


def _evidence_cols(aspect: str) -> np.ndarray:
    """Evidence column of each state code for one aspect: the state table's,
    else the aspect's default (non-finite values: the aspect's own)."""
    default, nonfinite = EVIDENCE[aspect]
    cols = np.full(len(_NAMES), _M[default], np.int64)
    for s in metadata.STATE_TABLE:
        if s.evidence is not None and s.name != "nonfinite":
            cols[s.code] = _M[s.evidence]
    if nonfinite is not None:
        cols[_S["nonfinite"]] = _M[nonfinite]
    return cols


class Engine:
    """Online diagnosis of one run.

    ``Engine(layers, thresholds=None, num_classes=None)``: ``layers`` is the
    row order, a list of {"name", "type"}; ``num_classes`` (K of a K-class
    cross-entropy, if known) enables the initial-loss check; it may also be
    set as an attribute before the first loss is seen. ``grad_clip`` (an
    attribute too): the max norm the run clips its gradients to, 0 or False
    when it does not clip, None when nothing says (the advice then stays
    the general one); a run that clips is not advised to clip.

    ``update(step, row)`` takes the float32 [L, len(METRICS)] statistics of
    one step and returns the events confirmed at this step (each carries its
    onset step). ``states``, ``status``, ``root_cause`` and ``events`` are the
    diagnosis so far; ``finish()`` adds what only the end of a run decides.
    """

    def __init__(self, layers, thresholds: Thresholds | None = None, num_classes: int | None = None,
                 grad_clip: float | bool | None = None):
        if thresholds is not None and not isinstance(thresholds, Thresholds):
            raise TypeError(f"thresholds must be a Thresholds, got {type(thresholds).__name__}")
        self.layers = [_layer(l) for l in layers]
        self.thresholds = thresholds or Thresholds()
        t = self.thresholds
        n = len(self.layers)
        self._clf = Classifier(self.layers, t, num_classes)
        persist, born = persistence(t), persistence(t)
        born[_S["vanishing"]] = t.persist_vanishing_born
        self._hyst = {a: Hysteresis(n, persist, born) for a in ASPECTS}
        for a in FINAL:  # (judged over the whole run at its end: nothing to persist)
            self._hyst[a] = Hysteresis(n, np.ones_like(persist))
        self._cols = {a: _evidence_cols(a) for a in ASPECTS}
        self._last = np.full((n, _NUM_METRICS), np.nan)  # last measured value of each stat
        self._failures: list[Failure] = []
        self.events: list[Event] = []
        self.root_cause: dict | None = None
        self.states = np.full(n, metadata.STATE_UNKNOWN, np.uint8)
        self._rank = np.array([metadata.state_rank(c) for c in range(len(_NAMES))])
        self._last_step = None
        self._finished = False
        self._worst = None  # worst confirmed state per row (changes only on transitions)
        self._bursts_judged = 0  # gradient bursts looked at for a note
        self._burst_noted = False
        self.grad_clip = grad_clip

    # ------------------------------------------------------------ properties
    @property
    def num_classes(self):
        return self._clf.num_classes

    @num_classes.setter
    def num_classes(self, k):
        self._clf.num_classes = None if k is None else int(k)

    @property
    def clips(self) -> bool | None:
        """Whether the run clips its gradients (None: no fact says)."""
        g = self.grad_clip
        if g is None or isinstance(g, bool):
            return g
        try:
            g = float(g)
        except (TypeError, ValueError):
            return None
        # (a max norm of inf is clip_grad_norm_ used only to measure the norm)
        return None if g != g else 0 < g < float("inf")

    @property
    def status(self) -> str:
        """"failing" when an error-level failure was found, or a warning-level
        one still stands (the layer has not recovered; a loss that started far
        from ln K has not fallen since); "healthy" otherwise, with warnings
        when a root cause is named all the same (DESIGN.md, *Severity and
        status*: a default initialisation whose loss starts above ln K and
        then trains is a warning, not a failure)."""
        if self.root_cause is None:
            return "healthy"
        improved = self._clf.loss.improved_step is not None
        for f in self._failures:
            if f.event.severity == "error":
                return "failing"
            if f.event.kind == "initial_loss":
                if not improved:
                    return "failing"
            elif self._hyst[f.aspect].confirmed[f.index] != HEALTHY and not self._costs_nothing(f):
                return "failing"
        return "healthy"

    def _costs_nothing(self, f: Failure) -> bool:
        """Whether a standing warning is about how a layer's units work, not
        whether the model learns, while the loss fell clearly since it began:
        saturated units (DESIGN.md, *Severity and status*: a warning alone is
        not a failure; a value head's tanh that saturates while the loss falls
        by orders of magnitude). Dead units are judged by what they cost the
        loss already (docs/diagnosis.md, "Dead is what cannot learn").
        Gradients that vanish before them, weights that stop or lose most
        updates to rounding, an output that collapses stay failures: the model
        stopped learning, or learns far less, though the loss may still fall
        (tests/test_engine_status.py; the scenario
        conv_bf16_weights_sgd_updates_rounded_away). A param group's layers
        held at a learning rate of 0 from the start, the rate the user set for
        them, cost nothing either while the rest learns: a part frozen on
        purpose (discriminative fine-tuning keeps a pretrained embedding at
        lr 0)."""
        ev = f.event
        by_design = ev.kind == "saturated_activation" or (
            ev.kind == "frozen_weights" and ev.extra.get("cause") == "lr_zero" and f.born)
        return by_design and self._clf.loss.plateau.fell_since(ev.step)

    # ---------------------------------------------------------------- layers
    def add_layers(self, new_layers) -> None:
        """Append rows for layers first seen later (the list only grows)."""
        new = [_layer(l) for l in new_layers]
        if not new:
            return
        self.layers.extend(new)
        n = len(self.layers)
        self._clf.grow(self.layers)
        for h in self._hyst.values():
            h.grow(n)
        self._last = np.concatenate([self._last, np.full((len(new), _NUM_METRICS), np.nan)])
        self.states = np.concatenate([self.states, np.full(len(new), metadata.STATE_UNKNOWN, np.uint8)])
        self._worst = None

    # ---------------------------------------------------------------- update
    def update(self, step: int, row) -> list[Event]:
        """Diagnose one step; return the events confirmed at this step."""
        row = np.asarray(row, dtype=np.float64)
        n = len(self.layers)
        if row.shape != (n, _NUM_METRICS):
            raise ValueError(f"row must have shape ({n}, {_NUM_METRICS}) for {n} layers, got {row.shape}")
        # Steps normally increase; a repeated or earlier step (e.g. record()
        # called per micro-batch with the same global step) is diagnosed as
        # the next measurement rather than refused: the diagnosis must not
        # stop over the numbering.
        step = int(step)
        self._last_step = step if self._last_step is None else max(step, self._last_step)
        confirmed = {a: h.confirmed for a, h in self._hyst.items()}
        raws = self._clf.classify(step, row, confirmed)
        new: list[Failure] = []
        last = self._last
        # Every aspect's measured rows against its confirmed states at once:
        # an aspect where none differs and nothing is pending (most, at most
        # steps) only notes which rows were seen. Until a transition: it
        # can change another aspect's states (take_pending below).
        raw_all = np.stack([np.asarray(raw, dtype=np.int16) for raw, _ in raws.values()])
        known_all = raw_all != UNMEASURED
        differs = (known_all & (raw_all != np.stack([confirmed[a] for a in raws]))).any(axis=1).tolist()
        measured = known_all.any(axis=1).tolist()
        for j, (aspect, (raw, onset)) in enumerate(raws.items()):
            hyst = self._hyst[aspect]
            if not new and not differs[j] and not hyst.pending:
                if measured[j]:
                    hyst.update_quiet(step, known_all[j])
                continue
            cols = self._cols[aspect]
            conf = confirmed[aspect]

            def evidence(raw=raw, conf=conf, cols=cols, aspect=aspect):
                code = np.where(raw == HEALTHY, conf, raw).clip(0)
                c = cols[code]
                idx = np.arange(n)
                return self._clf.evidence(aspect, code, row[idx, c], last[idx, c])

            for tr in hyst.update(step, raw, evidence, onset):
                if aspect == "fwd" and tr.to_code == _S["nonfinite"]:
                    # an explosion of this output, not yet confirmed, led here
                    pre = self._hyst["act"].take_pending(tr.index, (_S["act_exploding"],))
                    if pre is not None:
                        new.append(self._event(step, "act", pre, row))
                new.append(self._event(step, aspect, tr, row))
        self._last = np.where(np.isnan(row), last, row)
        self._update_states(raws, row, bool(new))
        out = self._record(new) if new else []
        return out + self._burst_note(step)

    # ---------------------------------------------------------------- finish
    def finish(self) -> list[Event]:
        """Events only decidable at the end of a run (a plateau of a short run)."""
        if self._finished or self._last_step is None:
            return []
        self._finished = True
        confirmed = {a: h.confirmed for a, h in self._hyst.items()}
        nan = np.full(len(self.layers), np.nan)  # no new row: the aspect gives the evidence
        new = []
        for aspect, (raw, onset) in self._clf.final(confirmed).items():
            for tr in self._hyst[aspect].update(self._last_step, raw, lambda: (nan, nan), onset):
                new.append(self._event(self._last_step, aspect, tr, self._last))
        return self._record(new) if new else []

    def _burst_note(self, step: int) -> list[Event]:
        """An info event, once a run, for a gradient burst that did no harm:
        no failure in the lr_window steps after it (a clip doing its job)."""
        bursts = self._clf.gradient.bursts
        w = self.thresholds.lr_window
        out = []
        while self._bursts_judged < len(bursts) and bursts[self._bursts_judged][0] <= step - w:
            b, row, norm, prev = bursts[self._bursts_judged]
            self._bursts_judged += 1
            harm = any(b < f.onset <= b + w for f in self._failures)
            if harm or self._burst_noted:
                continue
            self._burst_noted = True
            # the largest burst of that step
            _, row, norm, prev = max((x for x in bursts if x[0] == b), key=lambda x: x[2] / max(x[3], 1e-300))
            layer = self.layers[row]
            extra = {"note": "harmless_burst", "value_before": prev, "window": w}
            message = event_message("exploding_gradient", layer["name"], layer["type"], "healthy", "healthy", b,
                                    norm, prev, extra)
            out.append(Event(step=b, layer=layer["name"], kind="exploding_gradient", from_state="healthy",
                             to_state="healthy", value=_num(norm), severity="info", message=message, extra=extra))
        self.events.extend(out)
        return out

    # --------------------------------------------------------------- helpers
    def _event(self, step, aspect, tr, row) -> Failure:
        layer = self.layers[tr.index]
        frm, to = _NAMES[tr.from_code], _NAMES[tr.to_code]
        failing = tr.to_code != HEALTHY
        kind = EVENT_KIND[to if failing else frm]
        severity = metadata.STATE_SEVERITY[to] if failing else "info"
        extra = {"confirmed_step": int(step)}
        value, before, own = self._clf.event_fields(aspect, kind, tr, row)
        extra.update(own)
        if tr.born:
            extra["born_failing"] = True
        extra["value_before"] = before
        message = event_message(kind, layer["name"], layer["type"], frm, to, tr.onset, value, before, extra,
                                clips=self.clips)
        ev = Event(step=tr.onset, layer=layer["name"], kind=kind, from_state=frm, to_state=to,
                   value=_num(value), severity=severity, message=message,
                   extra={k: (_num(v) if isinstance(v, float) else v) for k, v in extra.items()})
        return Failure(ev, tr.index, aspect, tr.born, tr.earliest)

    def _record(self, new: list[Failure]) -> list[Event]:
        """Keep the new events (in onset order); refresh the root cause."""
        new.sort(key=lambda f: (f.onset, f.index))
        failing = False
        for f in new:
            self.events.append(f.event)
            if f.event.severity != "info":
                self._failures.append(f)
                failing = True
        out = [f.event for f in new]
        if failing:
            self.root_cause, attribution = find_root_cause(
                self._failures, dataclasses.replace(self._clf.facts(), clips=self.clips), self.thresholds)
            # a cause outside the layers (<optimizer>, <input>) is an event of
            # its own, once, so that the root cause is always in the timeline
            if attribution is not None and not any(
                    (e.kind, e.layer, e.step) == (attribution.kind, attribution.layer, attribution.step)
                    for e in self.events):
                prev = [e for e in self.events if e.layer == attribution.layer and e.extra.get("attribution")]
                if prev:  # an escalation of an earlier attribution (a loss spike, then explosions)
                    attribution = dataclasses.replace(attribution, from_state=prev[-1].to_state)
                self.events.append(attribution)
                out.append(attribution)
        return out

    def _update_states(self, raws, row, changed: bool) -> None:
        if changed or self._worst is None:
            conf = np.stack([h.confirmed for h in self._hyst.values()])  # [A, L]
            self._worst = conf[self._rank[conf].argmax(axis=0), np.arange(conf.shape[1])].astype(np.uint8)
        worst = self._worst
        measured = np.isfinite(row).any(axis=1)
        states = worst.copy()
        states[~measured & (worst == HEALTHY)] = metadata.STATE_UNKNOWN
        self.states = states


def _layer(l) -> dict:
    if not isinstance(l, dict) or "name" not in l:
        raise TypeError(f"a layer is a dict with 'name' and 'type', got {l!r}")
    out = {"name": str(l["name"]), "type": str(l.get("type", ""))}
    out.update((k, l[k]) for k in metadata.LAYER_EXTRAS if isinstance(l.get(k), str))
    return out


def _num(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None
