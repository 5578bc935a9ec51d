"""The root cause: the first failing layer, by the rules of DESIGN.md.

1. The earliest onset wins. A failure whose onset interval (from the step
   after its previous measurement, since some statistics are measured every
   Nth step, to its onset) reaches the earliest onset (plus
   ``Thresholds.tie_window``) ties with it; ties are broken by how failures
   propagate, never by the order of the hooks:
   - a bad batch (``<input>``) comes before everything it feeds;
   - non-finite values: forward before backward; in forward the first row in
     execution order (the module whose output turned non-finite), in backward
     the first module in backward order where it is born (its output
     gradient finite while its parameters' gradients, or the gradient it
     passed on to its input, are not: ``gout_nonfinite``), else the deepest
     layer with non-finite gradients (backward runs from the loss toward the
     input);
   - exploding: an activation explosion before the gradients it inflates (the
     first in forward order), then the highest gradient norm;
   - vanishing: the deepest dead or saturated layer below which gradients
     vanish; without one, the deepest vanishing layer (it spreads toward the
     input); dead/saturated layers alone: the first in forward order;
   - no gradient / frozen: the highest (closest to the loss) cut-off layer,
     where the cut is;
   - then the loss's own failures (initial loss, spike, plateau).
2. Causes outside the layers get the pseudo-layers, because that is where the
   fix goes: ``<optimizer>`` when a layer failure starts within
   ``lr_window`` steps after a learning-rate jump (or a schedule that kept
   raising the rate geometrically, by ``lr_jump_factor`` in all, over the
   ``lr_window`` steps before; a warmup that levels off is not blamed), or
   (not born failing) after
   a step where most layers moved by more than ``update_ratio_high`` of their
   norm; ``<input>`` when a layer next to the input is failing from the first
   step, or the loss is far from its initial value at step 0, and the first
   batch is far from unit scale (unnormalised inputs).
   The ``<optimizer>`` cause is named ``exploding_gradient`` when the layers
   diverged (exploding gradients or activations, inf/NaN), whichever symptom
   showed first; other symptoms (dead units, a loss spike alone) keep their
   kind. Such an attribution is an Event of its own (from "healthy" to the
   symptom's state; value: the learning rate for <optimizer>, the first
   batch's RMS for <input>), so that the root cause's (kind, layer, step) is
   always an event of the timeline; the root step is the picked event's step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..format.metadata import PSEUDO_INPUT, PSEUDO_OPTIMIZER
from .events import Event
from .explain import fmt
from .thresholds import Thresholds

__all__ = ["Failure", "RunFacts", "find_root_cause"]


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


@dataclass(frozen=True)
class RunFacts:
    """What the root cause reads about the run besides its failures: a
    read-only summary the classifier builds when asked."""

    lr_jumps: tuple = ()  # (step, lr_before, lr_after): discontinuities of the rate
    lr_steps: tuple = ()  # (step, lr) of the last steps
    high_update_steps: tuple = ()  # (step, lr): most layers moved > update_ratio_high
    input_rms0: float = math.nan  # RMS of the first healthy batch
    module_rows: tuple = ()  # rows that are modules (not pseudo-layers), forward order


# failures a learning rate too high produces in the layers
_LR_KINDS = {"exploding_gradient", "activation_explosion", "nonfinite", "dead_activation",
             "saturated_activation", "activation_collapse", "loss_spike"}
# failures of the first layers that unnormalised inputs produce
_INPUT_KINDS = {"saturated_activation", "activation_explosion", "exploding_gradient",
                "dead_activation"}


def find_root_cause(failures, ctx: RunFacts, t: Thresholds) -> tuple[dict | None, Event | None]:
    """(root, attribution): the root cause {"kind", "layer", "step", "message"}
    (None without failures) and, when it is attributed to a pseudo-layer
    (``<optimizer>``, ``<input>``) rather than to a failure event, the Event
    that records that attribution (else None). The root cause's (kind, layer,
    step) is always that of an event: the picked failure's or the attribution.

    ``ctx`` holds the facts of the run it reads (learning-rate jumps and
    steps, high-update steps, the first batch's scale, which rows are modules).
    """
    if not failures:
        return None, None
    first = min(f.onset for f in failures)
    group = [f for f in failures if f.earliest <= first + t.tie_window]
    pick = _pick(group)
    ev = pick.event
    message = ev.message
    upstream = sorted({f.event.layer for f in group if f.event.kind == "vanishing_gradient"
                       and f.index < pick.index and f is not pick})
    if upstream and ev.kind in ("dead_activation", "saturated_activation"):
        message = (f"{message} It blocks the gradient: {len(upstream)} layer(s) before it have "
                   f"vanishing gradients.")
    # the step of the picked event itself (not the tie group's earliest onset,
    # which may belong to a consequence measured sooner), so that the root
    # cause is an event of the timeline
    root = {"kind": ev.kind, "layer": ev.layer, "step": int(ev.step), "message": message}
    if ev.kind in _LR_KINDS and not ev.layer.startswith("<input"):
        opt = _optimizer_cause(pick, failures, ctx, t)
        if opt is not None:
            return opt
    # unnormalised inputs: a layer next to the input failing from the first
    # step, or a loss far from its initial value from the first step (the
    # first layers' outputs, hence the logits, scale with the inputs)
    unnorm_symptom = (pick.born and ev.kind in _INPUT_KINDS and not ev.layer.startswith("<")
                      and _near_input(pick.index, ctx)) or \
        (ev.kind == "initial_loss" and ev.step == 0 and ctx.input_rms0 > t.input_unnormalised)
    if ev.layer.startswith("<") and not unnorm_symptom:
        return root, None
    if unnorm_symptom:
        rms0 = ctx.input_rms0
        if rms0 == rms0 and (rms0 > t.input_unnormalised or rms0 < 1.0 / t.input_unnormalised):
            msg = (f"The inputs are not normalised (RMS {fmt(rms0)} in the first batch) and "
                   f"{ev.layer}: {ev.kind.replace('_', ' ')} from the first step. Try: normalising "
                   "the inputs to mean 0 and std 1.")
            return _attribution(ev, PSEUDO_INPUT, ev.kind, ev.to_state, ev.step, rms0, msg,
                                {"cause": "unnormalised_input"})
    return root, None


#: symptoms of a diverging optimisation (the updates blow the weights up)
_DIVERGENCE = {"exploding_gradient", "activation_explosion", "nonfinite"}


def _optimizer_cause(pick, failures, ctx: RunFacts, t: Thresholds):
    """The ``<optimizer>`` attribution of a failure right after a learning-rate
    jump, or (not born failing) after a step where most layers moved far."""
    jumps = [j for j in ctx.lr_jumps if 0 <= pick.onset - j[0] <= t.lr_window]
    if not jumps:
        rise = _lr_rise(ctx, pick.onset, t)
        if rise is not None:
            jumps = [rise]
    high = [] if pick.born else [h for h in ctx.high_update_steps if 0 <= pick.onset - h[0] <= t.lr_window]
    if not (jumps or high):
        return None
    s, lr = (jumps[-1][0], jumps[-1][2]) if jumps else high[0]
    ev = pick.event
    # the symptom: what it did to the layers (an explosion rather than the
    # loss spike that showed it first), when the layers failed too
    layer_fails = [f for f in failures if not f.event.layer.startswith("<")
                   and s <= f.onset <= s + t.lr_window and f.event.kind in _LR_KINDS]
    what = ev
    if layer_fails:
        what = _pick([f for f in layer_fails if f.earliest <= min(x.onset for x in layer_fails)]).event
    # a rate too high makes the updates diverge: whichever symptom shows first
    # (exploding gradients or activations, values overflowing to inf/NaN) it
    # is the same failure of the optimizer, named exploding_gradient; other
    # symptoms (ReLUs killed by one large step, a loss spike alone) keep theirs
    diverged = any(f.event.kind in _DIVERGENCE for f in layer_fails)
    kind, to = ("exploding_gradient", "exploding") if diverged else (what.kind, what.to_state)
    then = f"then {what.layer}: {what.kind.replace('_', ' ')} from step {what.step}"
    if jumps:
        a, b = jumps[-1][1], jumps[-1][2]
        if len(jumps[-1]) > 3:  # a schedule that kept raising the rate
            why = (f"The learning rate kept rising, from {fmt(a)} at step {jumps[-1][3]} to {fmt(b)} "
                   f"at step {s}; {then}.")
            extra = {"cause": "lr_rise", "lr_before": float(a)}
        else:
            why = f"The learning rate rose from {fmt(a)} to {fmt(b)} at step {s}; {then}."
            extra = {"cause": "lr_jump", "lr_before": float(a)}
    else:
        why = (f"Updates larger than {fmt(t.update_ratio_high)} of the weights in most layers "
               f"at step {s} (learning rate {fmt(lr)}); {then}.")
        extra = {"cause": "large_updates"}
    msg = (f"<optimizer>: {why} Likely cause: a learning rate too high for this model. Try: a "
           "lower learning rate, a warmup, torch.nn.utils.clip_grad_norm_.")
    extra["symptom_layer"], extra["symptom_kind"] = what.layer, what.kind
    return _attribution(what, PSEUDO_OPTIMIZER, kind, to, s, lr, msg, extra)


def _lr_rise(ctx: RunFacts, onset: int, t: Thresholds):
    """(step, lr_before, lr_after) of a rate that a schedule kept raising, by
    ``lr_jump_factor`` or more in all, over the ``lr_window`` steps up to the
    onset, with no single jump: a geometric (or faster) growth, as large in
    the second half of the window as in the first. A warmup (linear, cosine)
    rises most at its start and levels off: not blamed. The step is the first
    one at ``lr_jump_factor`` above the window's first rate. None without one."""
    pts = [(s, lr) for s, lr in ctx.lr_steps
           if onset - t.lr_window <= s <= onset and lr == lr and lr > 0]
    if len(pts) < 3:
        return None
    lo, mid, hi = pts[0][1], pts[len(pts) // 2][1], pts[-1][1]
    if not (hi >= t.lr_jump_factor * lo and mid > lo):
        return None
    if math.log(hi / mid) < 0.5 * math.log(mid / lo):  # levelling off: a warmup
        return None
    for s, lr in pts[1:]:
        if lr >= t.lr_jump_factor * lo:
            return (s, lo, lr, pts[0][0])
    return None


def _attribution(symptom: Event, layer, kind, to_state, step, value, message, extra):
    """(root, Event) naming a pseudo-layer as the cause of ``symptom``."""
    ev = Event(step=int(step), layer=layer, kind=kind, from_state="healthy", to_state=to_state,
               value=value, severity=symptom.severity, message=message,
               extra={**extra, "attribution": True,
                      "confirmed_step": symptom.extra.get("confirmed_step", int(symptom.step))})
    return {"kind": kind, "layer": layer, "step": int(step), "message": message}, ev


def _near_input(index: int, ctx: RunFacts) -> bool:
    """The row is the first module or the one right after it."""
    mods = ctx.module_rows
    return len(mods) > 0 and index <= mods[min(1, len(mods) - 1)]


def _pick(group):
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
    blockers = by_kind.get("dead_activation", []) + by_kind.get("saturated_activation", [])
    vans = by_kind.get("vanishing_gradient", [])
    if blockers and vans:
        top = min(v.index for v in vans)
        below = [b for b in blockers if b.index > top]
        return deepest(below) if below else first(blockers)
    if blockers:
        return first(blockers)
    if vans:
        return deepest(vans)
    if "activation_collapse" in by_kind:
        return first(by_kind["activation_collapse"])
    cut = by_kind.get("no_gradient", []) + by_kind.get("frozen_weights", [])
    if cut:
        return deepest(cut)
    for kind in ("initial_loss", "loss_spike", "loss_plateau"):
        if kind in by_kind:
            return by_kind[kind][0]
    return min(group, key=lambda f: (f.onset, f.index))
