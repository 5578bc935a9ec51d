"""Rules that blame ``<optimizer>``: a failure right after a change of a
param group's hyperparameters (the rate, the weight decay, the momentum), a
rate that a schedule kept raising, a step where most layers moved far, a loss
that rose from the first update on (born diverging), and a plateau or frozen
weights after a schedule took the rate to a thousandth of its peak. Each
stands aside when a fault visible before any update explains the large
first updates (:func:`.facts.fault_before_updates`).
"""

from __future__ import annotations

import math

from ...format.metadata import PSEUDO_INPUT, PSEUDO_OPTIMIZER
from ..chain import pick
from ..explain import KIND_MEANING, fmt, with_clipping
from ..thresholds import Thresholds
from .facts import (DECAY_KINDS, DIVERGENCE, LR_KINDS, RunFacts, attribution, fault_before_updates,
                    still_message)

__all__ = ["born_diverging", "lr_collapse", "optimizer_cause"]


def optimizer_cause(picked, failures, ctx: RunFacts, t: Thresholds):
    """The ``<optimizer>`` attribution of a failure right after a change of a
    param group's hyperparameters (the rate, the weight decay, the momentum:
    by a schedule or by hand), or (not born failing) after a step where most
    layers moved far."""
    ev = picked.event
    if ev.layer in (PSEUDO_INPUT, PSEUDO_OPTIMIZER):
        return None
    changes = [c for c in ctx.hyper_changes if 0 <= picked.onset - c[0] <= c[5]
               and ev.kind in (DECAY_KINDS if c[2] == "weight_decay" else LR_KINDS)]
    jumps = []
    if ev.kind in LR_KINDS and not any(c[2] == "lr" for c in changes):
        # the first group's rate (logs without per-group facts)
        jumps = [j for j in ctx.lr_jumps if 0 <= picked.onset - j[0] <= t.lr_window]
        if not jumps:
            rise = _lr_rise(ctx, picked.onset, t)
            if rise is not None:
                jumps = [rise]
    high = [] if picked.born or ev.kind not in LR_KINDS or fault_before_updates(ctx, t) else [
        h for h in ctx.high_update_steps if 0 <= picked.onset - h[0] <= t.lr_window]
    if not (changes or jumps or high):
        return None
    if changes:
        s, group, name, before, after, _, members = changes[-1]
        lr = after
    elif jumps:
        s, lr = jumps[-1][0], jumps[-1][2]
    else:
        s, lr = high[0]
    # the symptom: what it did to the layers (an explosion rather than the
    # loss spike that showed it first), when the layers failed too
    kinds = DECAY_KINDS if changes and changes[-1][2] == "weight_decay" else LR_KINDS
    layer_fails = [f for f in failures if not f.event.layer.startswith("<")
                   and s <= f.onset <= s + t.lr_window and f.event.kind in kinds]
    what = ev
    if layer_fails:
        what = pick([f for f in layer_fails if f.earliest <= min(x.onset for x in layer_fails)]).event
    # a rate too high makes the updates diverge: whichever symptom shows first
    # (exploding gradients or activations, values overflowing to inf/NaN) it
    # is the same failure of the optimizer, named exploding_gradient; other
    # symptoms (ReLUs killed by one large step, a loss spike alone) keep theirs
    diverged = any(f.event.kind in DIVERGENCE for f in layer_fails)
    kind, to = ("exploding_gradient", "exploding") if diverged else (what.kind, what.to_state)
    then = f"then {what.layer}: {what.kind.replace('_', ' ')} from step {what.step}"
    if changes:
        label = {"lr": "learning rate", "weight_decay": "weight decay", "momentum": "momentum"}[name]
        where = _group_label(group, members)
        why = f"The {label} of {where} rose from {fmt(before)} to {fmt(after)} at step {s}; {then}."
        extra = {"cause": "hyperparameter_change", "group": group, "hyperparameter": name,
                 "before": float(before), "after": float(after)}
        advice = {
            "lr": "a learning rate too high for this model. Try: the rate you meant (check the change at that "
                  "step), a warmup, torch.nn.utils.clip_grad_norm_.",
            "weight_decay": "a weight decay so large that it shrinks the weights to nothing. Try: the value you "
                            "meant (1e-4..1e-1 is usual for AdamW, 1e-4..5e-4 for SGD).",
            "momentum": "a momentum so close to 1 that the updates overshoot. Try: the value you meant (0.9 is "
                        "usual), or a lower learning rate with it.",
        }[name]
        msg = f"<optimizer>: {KIND_MEANING[kind]}. {why} Likely cause: {advice}"
    else:
        if jumps and len(jumps[-1]) > 3:  # a schedule that kept raising the rate
            a, b = jumps[-1][1], jumps[-1][2]
            why = (f"The learning rate kept rising, from {fmt(a)} at step {jumps[-1][3]} to {fmt(b)} "
                   f"at step {s}; {then}.")
            extra = {"cause": "lr_rise", "lr_before": float(a)}
        elif jumps:
            a, b = jumps[-1][1], jumps[-1][2]
            why = f"The learning rate rose from {fmt(a)} to {fmt(b)} at step {s}; {then}."
            extra = {"cause": "lr_jump", "lr_before": float(a)}
        else:
            why = (f"Updates larger than {fmt(t.update_ratio_high)} of the weights in most layers "
                   f"at step {s} (learning rate {fmt(lr)}); {then}.")
            extra = {"cause": "large_updates"}
        msg = (f"<optimizer>: {KIND_MEANING[kind]}. {why} Likely cause: a learning rate too high for this "
               "model. Try: a lower learning rate, a warmup, torch.nn.utils.clip_grad_norm_.")
    extra["symptom_layer"], extra["symptom_kind"] = what.layer, what.kind
    return attribution(what, PSEUDO_OPTIMIZER, kind, to, s, lr, with_clipping(msg, ctx.clips), extra)


def born_diverging(picked, failures, ctx: RunFacts, t: Thresholds):
    """A divergence of a run whose loss rose from its first steps on, to
    twice its first value by the first failure, without ever falling
    before: the updates make the loss worse from the first one (a sign error
    in a hand-written optimizer or loss, a rate far too high). Not for a
    layer failing before any update (an initialisation), nor a value born
    non-finite in a module (the loss did not climb to it)."""
    ev = picked.event
    if ev.kind not in DIVERGENCE | {"loss_spike"} or picked.born or ctx.first_loss is None:
        return None
    if ev.layer == PSEUDO_OPTIMIZER or ctx.loss_doubled is None or fault_before_updates(ctx, t):
        return None
    first, doubled, improved = int(ctx.first_loss[0]), ctx.loss_doubled, ctx.loss_improved
    if not (first < picked.onset <= first + t.loss_window and doubled <= picked.onset):
        return None
    if improved is not None and improved <= doubled:
        return None
    layer_fails = [f for f in failures if not f.event.layer.startswith("<") and f.event.kind in DIVERGENCE]
    kind, to = ("exploding_gradient", "exploding") if layer_fails else (ev.kind, ev.to_state)
    msg = (f"<optimizer>: {KIND_MEANING[kind]}. The loss rose from the first update on (it never fell below its first value "
           f"{fmt(ctx.first_loss[1])}); then {ev.layer}: {ev.kind.replace('_', ' ')} from step {ev.step}. Likely "
           "cause: updates that climb the loss: a sign error in a hand-written optimizer or loss (maximising "
           "instead of minimising), or a learning rate far too high. Try: checking the update's sign "
           "(p -= lr * grad) and the loss's, a much lower learning rate.")
    return attribution(ev, PSEUDO_OPTIMIZER, kind, to, first + 1, None, msg,
                        {"cause": "born_diverging", "symptom_layer": ev.layer, "symptom_kind": ev.kind})


def lr_collapse(picked, failures, ctx: RunFacts, t: Thresholds):
    """A loss that stopped falling, or weights that stopped moving, because a
    schedule took the rate to a thousandth of its peak (a per-epoch schedule
    stepped every batch) before: the cause is the schedule."""
    ev = picked.event
    if ev.kind not in ("loss_plateau", "frozen_weights") or ctx.lr_collapse is None:
        return None
    if ev.layer == PSEUDO_OPTIMIZER:
        return None  # (updates that collapsed: the event already gives the rate's history)
    step, peak, lr = ctx.lr_collapse
    if not step <= picked.onset + t.lr_window:
        return None
    then = still_message(ev)
    msg = (f"<optimizer>: the learning rate fell from {fmt(peak)} to {fmt(lr)} by step {step}; {then}. Likely "
           "cause: a schedule stepped too often (a per-epoch scheduler.step() called every batch) or decaying "
           "too fast. Try: checking where scheduler.step() is called and its step_size/gamma.")
    return attribution(ev, PSEUDO_OPTIMIZER, ev.kind, ev.to_state, step, lr, msg,
                        {"cause": "lr_collapse", "lr_before": float(peak)})


def _group_label(group, members) -> str:
    """"param group 1 (3 layers: a, b, c)"."""
    names = ", ".join(members[:3]) + (", ..." if len(members) > 3 else "")
    return f"param group {group} ({len(members)} layer{'s' if len(members) != 1 else ''}: {names})"


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
