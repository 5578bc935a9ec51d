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
from .states import ASPECTS, Classifier
from .thresholds import Thresholds
from .transitions import UNMEASURED, Hysteresis

__all__ = ["Engine"]

_M = metadata.METRIC_INDEX
_S = metadata.STATE_CODE
_NAMES = metadata.STATES
HEALTHY = _S["healthy"]
_NUM_METRICS = len(metadata.METRICS)

#: event kind of a (failing) state, from the state table
_KIND = {s.name: s.kind for s in metadata.STATE_TABLE if s.kind}
# evidence column of each state code, per aspect: the state table's, else the
# aspect's default (non-finite differs by aspect)
_DEFAULT_COL = {"grad": "grad_norm", "fwd": "act_nonfinite", "act": "act_absmax", "weight": "update_ratio",
                "input": "act_absmax", "loss": "value", "plateau": "value", "init": "value",
                "scaler": "scale"}
_NONFINITE_COL = {"grad": "grad_nonfinite", "fwd": "act_nonfinite", "loss": "value"}


def _evidence_cols(aspect: str) -> np.ndarray:
    cols = np.full(len(_NAMES), _M[_DEFAULT_COL[aspect]], np.int64)
    for s in metadata.STATE_TABLE:
        # the non-finite evidence depends on the aspect (below)
        if s.evidence is not None and s.name != "nonfinite":
            cols[s.code] = _M[s.evidence]
    if aspect in _NONFINITE_COL:
        cols[_S["nonfinite"]] = _M[_NONFINITE_COL[aspect]]
    return cols


class Engine:
    """Online diagnosis of one run.

    ``Engine(layers, thresholds=None, num_classes=None)``: ``layers`` is the
    row order, a list of {"name", "type"}; ``num_classes`` (K of a K-class
    cross-entropy, if known) enables the initial-loss check; it may also be
    set as an attribute before the first loss is seen.

    ``update(step, row)`` takes the float32 [L, len(METRICS)] statistics of
    one step and returns the events confirmed at this step (each carries its
    onset step). ``states``, ``status``, ``root_cause`` and ``events`` are the
    diagnosis so far; ``finish()`` adds what only the end of a run decides.
    """

    def __init__(self, layers, thresholds: Thresholds | None = None, num_classes: int | None = None):
        if thresholds is not None and not isinstance(thresholds, Thresholds):
            raise TypeError(f"thresholds must be a Thresholds, got {type(thresholds).__name__}")
        self.layers = [_layer(l) for l in layers]
        self.thresholds = thresholds or Thresholds()
        t = self.thresholds
        n = len(self.layers)
        self._clf = Classifier(self.layers, t, num_classes)
        persist = np.full(len(_NAMES), t.persist_steps, np.int64)
        persist[HEALTHY] = t.persist_recover
        persist[_S["nonfinite"]] = t.persist_nonfinite
        persist[_S["vanishing"]] = t.persist_vanishing
        persist[_S["frozen"]] = t.frozen_steps
        for s in ("data_anomaly", "initial_loss", "loss_plateau", "scaler_collapse"):
            persist[_S[s]] = 1  # their classifiers already judge over many steps or batches
        self._hyst = {a: Hysteresis(n, persist) for a in ASPECTS}
        self._cols = {a: _evidence_cols(a) for a in ASPECTS}
        self._last = np.full((n, _NUM_METRICS), np.nan)  # last measured value of each stat
        self._dead_last = np.full(n, np.nan)  # last effective dead fraction (see states.py)
        self._failures: list[Failure] = []
        self.events: list[Event] = []
        self.root_cause: dict | None = None
        self.states = np.full(n, metadata.STATE_UNKNOWN, np.uint8)
        self._rank = np.array([metadata.state_rank(c) for c in range(len(_NAMES))])
        self._last_step = None
        self._finished = False
        self._worst = None  # worst confirmed state per row (changes only on transitions)

    # ------------------------------------------------------------ properties
    @property
    def num_classes(self):
        return self._clf.num_classes

    @num_classes.setter
    def num_classes(self, k):
        self._clf.num_classes = None if k is None else int(k)

    @property
    def status(self) -> str:
        """"failing" iff a root cause was found, i.e. a warning or error fired.

        A healthy run is silent, so any warning-level failure (vanishing
        gradients, dead units...) already makes the run failing; severity only
        says how urgent it is (on_error="raise" and the log line act on errors).
        """
        return "healthy" if self.root_cause is None else "failing"

    # ---------------------------------------------------------------- layers
    def add_layers(self, new_layers) -> None:
        """Append rows for layers first seen later (the list only grows)."""
        new = [_layer(l) for l in new_layers]
        if not new:
            return
        self.layers.extend(new)
        n = len(self.layers)
        self._clf.grow(self.layers, n)
        for h in self._hyst.values():
            h.grow(n)
        self._last = np.concatenate([self._last, np.full((len(new), _NUM_METRICS), np.nan)])
        self._dead_last = np.concatenate([self._dead_last, np.full(len(new), np.nan)])
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
        for aspect, (raw, onset) in raws.items():
            cols = self._cols[aspect]
            conf = confirmed[aspect]

            def evidence(raw=raw, conf=conf, cols=cols, aspect=aspect):
                code = np.where(raw == HEALTHY, conf, raw).clip(0)
                c = cols[code]
                idx = np.arange(n)
                value, before = row[idx, c], last[idx, c]
                if aspect == "act":  # dead units after a functional activation
                    dead = code == _S["dead"]
                    value = np.where(dead, self._clf.dead_eff, value)
                    before = np.where(dead, self._dead_last, before)
                return value, before

            for tr in self._hyst[aspect].update(step, raw, evidence, onset):
                if aspect == "fwd" and tr.to_code == _S["nonfinite"]:
                    # an explosion of this output, not yet confirmed, led here
                    pre = self._hyst["act"].take_pending(tr.index, (_S["act_exploding"],))
                    if pre is not None:
                        new.append(self._event(step, "act", pre, row))
                new.append(self._event(step, aspect, tr, row))
        self._last = np.where(np.isnan(row), last, row)
        eff = self._clf.dead_eff
        self._dead_last = np.where(np.isnan(eff), self._dead_last, eff)
        self._update_states(raws, row, bool(new))
        return self._record(new) if new else []

    # ---------------------------------------------------------------- finish
    def finish(self) -> list[Event]:
        """Events only decidable at the end of a run (a plateau of a short run)."""
        if self._finished or self._last_step is None:
            return []
        self._finished = True
        i = self._clf.kinds.loss_index
        h = self._hyst["plateau"]
        if i < 0 or h.confirmed[i] != HEALTHY:
            return []
        code = self._clf.final_plateau(False)
        if code != _S["loss_plateau"]:
            return []
        raw = np.full(len(self.layers), UNMEASURED, np.int16)
        raw[i] = code
        onset = np.full(len(self.layers), -1, np.int64)
        onset[i] = self._clf.plateau_onset
        row = self._last
        new = []

        def evidence():
            v = np.full(len(self.layers), np.nan)
            return v, v

        for tr in h.update(self._last_step, raw, evidence, onset):
            new.append(self._event(self._last_step, "plateau", tr, row))
        return self._record(new) if new else []

    # --------------------------------------------------------------- helpers
    def _event(self, step, aspect, tr, row) -> Failure:
        layer = self.layers[tr.index]
        frm, to = _NAMES[tr.from_code], _NAMES[tr.to_code]
        failing = tr.to_code != HEALTHY
        kind = _KIND[to if failing else frm]
        severity = metadata.STATE_SEVERITY[to] if failing else "info"
        value, before = tr.value, tr.value_before
        extra = {"confirmed_step": int(step)}
        clf = self._clf
        if kind == "nonfinite":
            extra["side"] = {"grad": "backward", "loss": "loss"}.get(aspect, "forward")
            i = tr.index
            # the row before in forward order (the previous module, or
            # <input>) whose output is already non-finite: propagated, not born
            prev = i - 1 if i > 0 and row[i - 1, _M["act_nonfinite"]] > 0 else -1
            if aspect == "fwd":
                extra["input_nonfinite"] = bool(row[i, _M["in_nonfinite"]] > 0)
                # (in a branch, a finite input means born here whatever came before)
                if prev >= 0 and not row[i, _M["in_nonfinite"]] == 0:
                    extra["from_layer"] = self.layers[prev]["name"]
            elif aspect == "loss":
                if prev >= 0:
                    extra["from_layer"] = self.layers[prev]["name"]
            elif aspect == "grad":
                extra["forward_nonfinite"] = clf.fwd_nonfinite
                if clf.bwd_measured:
                    extra["bwd_origin"] = bool(clf.bwd_origin[i])
                    if clf.bwd_received[i]:
                        extra["received"] = True
                    elif clf.bwd_origin[i]:
                        # born in the gradient it passed on to its input, not
                        # (only) in its parameters' gradients
                        inp = i > 0 and bool(clf.bwd_received[i - 1])
                        par = bool(row[i, _M["grad_nonfinite"]] > 0 or np.isinf(row[i, _M["grad_norm"]]))
                        extra["via"] = "both" if inp and par else ("input" if inp else "parameters")
        if kind == "activation_explosion" and failing and bool(clf.act_cumulative[tr.index]):
            extra["amplified"] = "cumulative"
        if kind == "dead_activation" and failing and bool(clf.dead_via[tr.index]):
            extra["via"] = "functional_activation"
        if aspect == "input" and failing:
            extra["reason"] = clf.input_reason
            extra["std"] = float(row[tr.index, _M["act_std"]])
        if aspect == "plateau":
            if failing:
                extra["reason"] = clf.plateau_reason
                extra["num_classes"] = clf.num_classes
            before, value = clf.plateau_level_before, clf.plateau_level
        if aspect == "init":
            k = clf.num_classes
            extra["num_classes"] = k
            before = math.log(k) if k else math.nan
        if aspect == "scaler" and failing and clf.dec_origin is not None:
            side, idx = clf.dec_origin
            extra["origin"] = self.layers[idx]["name"]
            extra["origin_side"] = side
        if tr.born:
            extra["born_failing"] = True
        extra["value_before"] = before
        message = event_message(kind, layer["name"], layer["type"], frm, to, tr.onset, value, before, extra)
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
            self.root_cause, attribution = find_root_cause(self._failures, self._clf, self.thresholds)
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
    return {"name": str(l["name"]), "type": str(l.get("type", ""))}


def _num(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None
