"""How failures propagate: which of the failures that start together comes
first (the tie-break of DESIGN.md's rules, see rootcause.py), and which
failures another one explains.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .events import Event

__all__ = ["Failure", "ACTIVATION_KINDS", "pick", "explained_by_frozen", "explained_by_blockers",
           "explained_by_blind_input"]


@dataclass(frozen=True)
class Failure:
    """A failure event with what the propagation rules need."""

    event: Event
    index: int  # row (forward order; <input> first)
    aspect: str  # "grad", "act", "loss", ...
    born: bool  # failing from the layer's first measurement
    earliest: int  # earliest possible onset (statistics measured every Nth step)

    @property
    def onset(self) -> int:
        return self.event.step


# activation failures: dead, saturated or constant layers (blockers of the
# gradient, links of a chain; frozen weights explain them in their own layer:
# a zero-initialised layer that never moves stays dead or constant)
ACTIVATION_KINDS = ("dead_activation", "saturated_activation", "activation_collapse")


def explained_by_frozen(group, failures) -> list:
    """``group`` without the activation failures of layers that are frozen
    from the same onset or before: a layer that never moves (not in the
    optimizer, a rate of 0) keeps whatever its initialisation gave it, dead or
    constant (a zero-initialised BatchNorm), and the frozen weights are the
    first link."""
    frozen = {}
    for f in failures:
        if f.event.kind == "frozen_weights":
            frozen[f.index] = min(frozen.get(f.index, f.onset), f.onset)
    if not frozen:
        return group
    kept = [f for f in group if not (f.event.kind in ACTIVATION_KINDS and frozen.get(f.index, math.inf) <= f.onset)]
    frozen_in = [f for f in failures if f.event.kind == "frozen_weights" and f.index in frozen
                 and any(g.index == f.index for g in group if g not in kept)]
    return kept + [f for f in frozen_in if f not in kept]


#: failures that a dead or constant input produces in the layer it feeds (a
#: normalisation layer dividing by a zero spread, a bias gradient that is all
#: the layer has left), whatever their severity
_FED_KINDS = ("exploding_gradient", "activation_explosion")
#: the blockers whose output is (nearly) the same for every sample
_ZERO_KINDS = ("dead_activation", "activation_collapse")


def explained_by_blockers(group) -> list:
    """``group`` without the failures of a layer fed by a dead or constant
    layer of the same group (the row before it in forward order, or the end
    of a chain of such rows): that layer is the first link, even when what it
    does to the next one is error-level and its own finding a warning
    (severity says how urgent, never what came first: DESIGN.md)."""
    zero = {f.index for f in group if f.event.kind in _ZERO_KINDS}
    if not zero:
        return group
    return [f for f in group if not (f.event.kind in _FED_KINDS and f.aspect != "accum"
                                     and f.index not in zero and f.index - 1 in zero)]


def explained_by_blind_input(group, blind_rows) -> list:
    """``group`` without the constant outputs (``activation_collapse``) of
    layers fed by a layer whose output was the same for every sample from
    the start (``RunFacts.blind_rows``): fed one input, a layer gives one
    output, and the blind layer before it is where the sample was lost (a
    tanh RNN saturated at +-1 by raw inputs makes its forecaster's output
    constant; tests/test_diagnosis_rules.py)."""
    blind = set(blind_rows)
    if not blind:
        return group
    kept = [f for f in group if not (f.event.kind == "activation_collapse" and f.index - 1 in blind)]
    return kept or group


def pick(group) -> Failure:
    """The failure that the propagation rules (rootcause.py's docstring) put
    first among ``group``, failures of the same onset."""
    by_kind = {}
    for f in group:
        by_kind.setdefault(f.event.kind, []).append(f)

    def first(fs):
        return min(fs, key=lambda f: (f.index, f.onset))

    def deepest(fs):
        return max(fs, key=lambda f: (f.index, -f.onset))

    if "data_anomaly" in by_kind:
        return first(by_kind["data_anomaly"])
    nonfinite = by_kind.get("nonfinite", [])
    fwd = [f for f in nonfinite if f.aspect in ("fwd", "loss")]
    if fwd:
        return min(fwd, key=lambda f: (f.onset, f.index))
    accum = [f for f in by_kind.get("exploding_gradient", []) if f.aspect == "accum"]
    if accum:  # gradients that accumulate across steps: their growth follows
        return accum[0]
    if "activation_explosion" in by_kind:
        return first(by_kind["activation_explosion"])
    if "exploding_gradient" in by_kind:
        return max(by_kind["exploding_gradient"],
                   key=lambda f: (f.event.value if f.event.value is not None else 0.0, -f.index))
    if nonfinite:
        # backward: where the output gradients say it is born (gout_nonfinite),
        # else the deepest layer (backward runs from the loss toward the input)
        return max(nonfinite, key=lambda f: (-f.onset, bool(f.event.extra.get("bwd_origin")), f.index))
    if "scaler_collapse" in by_kind:
        return by_kind["scaler_collapse"][0]
    blockers = [f for k in ACTIVATION_KINDS for f in by_kind.get(k, [])]
    vans = by_kind.get("vanishing_gradient", [])
    if blockers and vans:
        # a chain of dead or constant layers (each fed by the one before)
        # starts at its first link, whose input is alive; separate blockers
        # (saturated layers between Linears) attenuate the gradient each:
        # the deepest one is where it starts to vanish
        # (a link may itself be the highest vanishing layer: zero weights
        # give a dead output and no gradient alike)
        top = min(v.index for v in vans)
        below = [b for b in blockers if b.index >= top]
        links = {b.index for b in blockers}
        roots = [b for b in below if b.index - 1 not in links]
        return deepest(roots or below) if below else first(blockers)
    if blockers:
        return first(blockers)
    if vans:
        return deepest(vans)
    cut = by_kind.get("no_gradient", []) + by_kind.get("frozen_weights", [])
    if cut:
        return deepest(cut)
    for kind in ("initial_loss", "loss_spike", "loss_plateau"):
        if kind in by_kind:
            return by_kind[kind][0]
    return min(group, key=lambda f: (f.onset, f.index))
