"""Hysteresis: turn per-step raw states into confirmed transitions.

One ``Hysteresis`` tracks one aspect (gradient, activation, ...) of every
layer, vectorised over layers. A raw state must hold for ``persist`` measured
steps in a row before it becomes the confirmed state; the transition's onset
is the first of those steps (or an explicit onset the classifier supplies, e.g.
the first of a run of GradScaler back-offs). Unmeasured steps (raw = -1, from
NaN statistics) neither confirm nor break a run, so statistics measured only
every Nth step work unchanged. A layer that is failing from its first
measurement (born failing, e.g. a bad initialisation) gets a transition from
"healthy" with its onset at that first step.

The row written at a step holds the states confirmed by then, so a state
confirmed ``persist`` steps after its onset would show late on the map:
readers give the cells from the onset the event's state
(``format/event_states.py``), so the map and the events agree.

Escalation: an explosion (or a loss spike) still waiting for confirmation
when the same layer turns non-finite is confirmed by the non-finite value (the
explosion is what produced it), so both transitions are reported, in order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..format import metadata

__all__ = ["Hysteresis", "Transition", "UNMEASURED"]

UNMEASURED = -1
HEALTHY = metadata.STATE_CODE["healthy"]
_ESCALATES_TO_NONFINITE = (metadata.STATE_CODE["exploding"], metadata.STATE_CODE["act_exploding"],
                           metadata.STATE_CODE["loss_spike"])
_NONFINITE = metadata.STATE_CODE["nonfinite"]


@dataclass(frozen=True)
class Transition:
    """A confirmed change of one layer's state in one aspect."""

    index: int  # row index of the layer
    from_code: int
    to_code: int
    onset: int  # first step of the new state
    value: float  # evidence at the onset step
    value_before: float  # the same evidence one measured step earlier
    born: bool  # failing from the layer's first measurement
    earliest: int  # earliest possible onset: the step after the previous measurement


class Hysteresis:
    """Confirmed states of one aspect for every layer.

    ``persist`` maps a state code to the number of consecutive measured steps
    that confirm it (a sequence indexed by code); ``born_persist``, where
    given, the same for a run that starts at the layer's first measurement.
    """

    # per-layer arrays: name -> (dtype, value of a new layer)
    _ARRAYS = {
        "confirmed": (np.int16, HEALTHY),  # the confirmed state
        "_cand": (np.int16, UNMEASURED),  # state of the run waiting for confirmation
        "_start": (np.int64, 0),  # its onset
        "_count": (np.int64, 0),  # its length in measured steps
        "_value": (np.float64, np.nan),  # its evidence at the onset
        "_before": (np.float64, np.nan),  # ... and one measurement earlier
        "_earliest": (np.int64, 0),  # its earliest possible onset
        "_first": (np.int64, -1),  # first measured step (-1 = never)
        "_seen": (np.int64, -1),  # last measured step (-1 = never)
        # an explosion overtaken by a non-finite value (see the module doc)
        "_pre_code": (np.int16, UNMEASURED),
        "_pre_start": (np.int64, 0),
        "_pre_value": (np.float64, np.nan),
        "_pre_before": (np.float64, np.nan),
        "_pre_earliest": (np.int64, 0),
    }

    def __init__(self, n: int, persist, born_persist=None):
        self._persist = np.asarray(persist, dtype=np.int64)
        self._born_persist = None if born_persist is None else np.asarray(born_persist, dtype=np.int64)
        self._pending = False  # some layer has a run waiting for confirmation
        self._all_seen = False  # every layer has been measured once
        for name, (dtype, _) in self._ARRAYS.items():
            setattr(self, name, np.zeros(0, dtype))
        self.grow(n)

    def grow(self, n: int) -> None:
        """Extend to ``n`` layers (new layers start healthy, never measured)."""
        k = n - len(self.confirmed)
        if k <= 0:
            return
        for name, (dtype, fill) in self._ARRAYS.items():
            setattr(self, name, np.concatenate([getattr(self, name), np.full(k, fill, dtype)]))
        self._all_seen = False

    def update(self, step: int, raw: np.ndarray, evidence, onset: np.ndarray | None = None):
        """Feed one step's raw states; return the confirmed transitions.

        ``raw``: int [L] state codes, UNMEASURED where nothing was measured.
        ``evidence``: a callable returning (value [L], before [L]): the
        evidence of the state change (e.g. the gradient norm) at this step and
        at the previous measurement. It is called only when some layer starts
        a new run, so a quiet step costs a few comparisons.
        ``onset``: optional int [L]; where >= 0, the onset to use for a run
        that starts at this step (the classifier knows it began earlier).
        """
        raw = np.asarray(raw, dtype=np.int16)
        known = raw != UNMEASURED
        if not known.any():
            return []
        self._note_seen(step, known)
        differs = known & (raw != self.confirmed)
        if self._pending:
            # back to the confirmed state: any pending run is broken
            back = known & ~differs
            self._cand[back] = UNMEASURED
            self._count[back] = 0
            self._pre_code[back] = UNMEASURED
        if not differs.any():
            self._pending = bool((self._cand != UNMEASURED).any()) if self._pending else False
            self._seen[known] = step
            return []
        prev_seen = self._seen.copy()
        self._seen[known] = step
        cont = differs & (raw == self._cand)
        new = differs & ~cont
        self._count[cont] += 1
        if new.any():
            # an unconfirmed explosion overtaken by a non-finite value
            esc = new & (raw == _NONFINITE) & np.isin(self._cand, _ESCALATES_TO_NONFINITE)
            self._pre_code[new] = UNMEASURED
            if esc.any():
                self._pre_code[esc] = self._cand[esc]
                self._pre_start[esc] = self._start[esc]
                self._pre_value[esc] = self._value[esc]
                self._pre_before[esc] = self._before[esc]
                self._pre_earliest[esc] = self._earliest[esc]
            self._cand[new] = raw[new]
            self._count[new] = 1
            starts = np.full(len(raw), step, np.int64)
            if onset is not None:
                onset = np.asarray(onset, dtype=np.int64)
                starts = np.where(onset >= 0, np.minimum(onset, step), step)
            self._start[new] = starts[new]
            # measured every Nth step, a state may have begun right after the
            # previous measurement: the root cause compares these intervals
            earliest = np.where(prev_seen >= 0, np.minimum(prev_seen + 1, starts), starts)
            self._earliest[new] = earliest[new]
            value, before = evidence()
            self._value[new] = value[new]
            self._before[new] = before[new]
        self._pending = True
        codes = raw.clip(0, len(self._persist) - 1)
        need = self._persist[codes]
        if self._born_persist is not None:
            need = np.where(self._start == self._first, self._born_persist[codes], need)
        fire = np.flatnonzero(differs & (self._count >= need))
        out = []
        for i in fire:
            frm, to = int(self.confirmed[i]), int(raw[i])
            start = int(self._start[i])
            if self._pre_code[i] != UNMEASURED and frm == HEALTHY:
                pre = int(self._pre_code[i])
                out.append(Transition(int(i), frm, pre, int(self._pre_start[i]),
                                      float(self._pre_value[i]), float(self._pre_before[i]),
                                      int(self._pre_start[i]) == self._first[i],
                                      int(self._pre_earliest[i])))
                frm = pre
            out.append(Transition(int(i), frm, to, start, float(self._value[i]),
                                  float(self._before[i]), bool(start == self._first[i]),
                                  int(self._earliest[i])))
            self.confirmed[i] = to
            self._cand[i] = UNMEASURED
            self._count[i] = 0
            self._pre_code[i] = UNMEASURED
        return out

    @property
    def pending(self) -> bool:
        """Some layer has a run waiting for confirmation (or had one at the
        last step that changed anything)."""
        return self._pending

    def update_quiet(self, step: int, known: np.ndarray) -> None:
        """:meth:`update` of a step whose measured rows (``known``, at least
        one) all hold their confirmed state, with nothing :attr:`pending`:
        only when each row was seen changes (the engine finds such steps for
        all its aspects at once)."""
        self._note_seen(step, known)
        self._seen[known] = step

    def _note_seen(self, step: int, known: np.ndarray) -> None:
        if not self._all_seen:
            self._first[known & (self._first < 0)] = step
            self._all_seen = bool((self._first >= 0).all())

    def take_pending(self, i: int, codes) -> Transition | None:
        """Confirm layer ``i``'s unconfirmed run if its state is in ``codes``.

        For escalation across aspects: an activation explosion still waiting
        for confirmation when the same layer's output turns non-finite.
        """
        cand = int(self._cand[i])
        if cand == UNMEASURED or cand not in codes or self._count[i] < 1:
            return None
        frm = int(self.confirmed[i])
        tr = Transition(int(i), frm, cand, int(self._start[i]), float(self._value[i]),
                        float(self._before[i]), bool(self._start[i] == self._first[i]),
                        int(self._earliest[i]))
        self.confirmed[i] = cand
        self._cand[i] = UNMEASURED
        self._count[i] = 0
        return tr
