"""Causes around the picked failure: rules that name, instead of the first
failing layer, what made it fail (the optimizer's hyperparameters, a step
that moved nothing, a gradient burst, where a GradScaler's inf is born, the
layer that passes no gradient on). Each rule reads the run's facts
(:class:`RunFacts`) and returns ``(root, attribution Event)`` or None; the
root cause tries them in ``RULES`` order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..format.metadata import PSEUDO_INPUT, PSEUDO_LOSS, PSEUDO_OPTIMIZER
from .chain import Failure, pick
from .events import Event
from .explain import KIND_MEANING, fmt, fmt_change, with_clipping
from .thresholds import Thresholds

__all__ = ["RunFacts", "RULES", "LR_KINDS", "DECAY_KINDS", "attribution", "extreme_before_updates",
           "inputs_explain_first_updates", "fault_before_updates", "near_input"]


@dataclass(frozen=True)
class RunFacts:
    """What the root cause reads about the run besides its failures: a
    read-only summary the classifier builds when asked."""

    lr_jumps: tuple = ()  # (step, lr_before, lr_after): discontinuities of the rate
    lr_steps: tuple = ()  # (step, lr) of the last steps
    high_update_steps: tuple = ()  # (step, lr): most layers moved > update_ratio_high
    input_rms0: float = math.nan  # RMS of the first healthy batch
    module_rows: tuple = ()  # rows that are modules (not pseudo-layers), forward order
    param_rows: tuple = ()  # module rows with trainable parameters
    #: discontinuities of a param group's hyperparameters:
    #: (step, group, name, before, after, window, layers of the group)
    hyper_changes: tuple = ()
    lr_collapse: tuple | None = None  # (step, peak, lr): the rate fell to vanish_ratio x its peak
    bursts: tuple = ()  # (step, row, norm, largest norm before): single-step gradient bursts
    names: tuple = ()  # row names
    first_loss: tuple | None = None  # (step, value) of the first loss
    loss_improved: int | None = None  # the first step with a loss clearly below the first one
    loss_doubled: int | None = None  # the first step with a loss above (1 + plateau_max_rise) x the first
    clips: bool | None = None  # the run clips its gradients (None: no fact says)
    #: rows whose gradients (against their weights) or activations were
    #: extreme at the first step, before any update
    extreme_first: tuple = ()
    first_step: int = 0  # of the run
    #: the first batch holds only integers as floats (0.5) or by its dtype
    #: (1, and then input_rms0 is NaN), with its max |x|; NaN: unknown
    input_integers: float = math.nan
    input_absmax0: float = math.nan
    #: (step, median update ratio, highest rate of the run) at the largest
    #: median update ratio of the model in the run (None: never measured)
    update_peak: tuple | None = None
    #: the variance of the regression targets (median over recent batches;
    #: recorded under MSE-like criteria), NaN when not recorded
    target_var: float = math.nan


# failures a learning rate too high produces in the layers
LR_KINDS = {"exploding_gradient", "activation_explosion", "nonfinite", "dead_activation",
            "saturated_activation", "activation_collapse", "loss_spike"}
# failures that a large weight decay produces (weights shrinking to nothing)
DECAY_KINDS = LR_KINDS | {"vanishing_gradient", "loss_plateau"}

#: symptoms of a diverging optimisation (the updates blow the weights up)
_DIVERGENCE = {"exploding_gradient", "activation_explosion", "nonfinite"}


def _scaler_origin(picked, failures, ctx: RunFacts, t: Thresholds):
    """A collapsed GradScaler scale is the symptom of inf/NaN that lowering
    the scale cannot remove: the root is where they are born (the first
    non-finite output in forward, else where the gradient turns non-finite in
    backward, the loss's own backward included)."""
    ev = picked.event
    origin = ev.extra.get("origin") if ev.kind == "scaler_collapse" else None
    if not origin:
        return None
    side = ev.extra.get("origin_side", "backward")
    where = {"forward": f"the output of {origin}",
             "backward": "the loss's backward" if origin == PSEUDO_LOSS else f"the backward of {origin}"}[side]
    msg = (f"{origin}: non-finite values born in {where} at every step from step {ev.step}; the GradScaler "
           f"skipped those steps and its scale collapsed ({fmt_change(ev.extra.get('value_before'), ev.value)}). Lowering the scale cannot remove "
           "an inf/NaN that the scale does not cause. Try: fixing that op (an epsilon inside sqrt/log, a clamp "
           "before exp, float32 for it via torch.autocast(enabled=False)).")
    return attribution(ev, origin, "nonfinite", "nonfinite", ev.step, None, msg,
                        {"cause": "scaler_origin", "side": side, "symptom_kind": "scaler_collapse"})


def _optimizer_cause(picked, failures, ctx: RunFacts, t: Thresholds):
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
    diverged = any(f.event.kind in _DIVERGENCE for f in layer_fails)
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


def _born_diverging(picked, failures, ctx: RunFacts, t: Thresholds):
    """A divergence of a run whose loss rose from its first steps on, to
    twice its first value by the first failure, without ever falling
    before: the updates make the loss worse from the first one (a sign error
    in a hand-written optimizer or loss, a rate far too high). Not for a
    layer failing before any update (an initialisation), nor a value born
    non-finite in a module (the loss did not climb to it)."""
    ev = picked.event
    if ev.kind not in _DIVERGENCE | {"loss_spike"} or picked.born or ctx.first_loss is None:
        return None
    if ev.layer == PSEUDO_OPTIMIZER or ctx.loss_doubled is None or fault_before_updates(ctx, t):
        return None
    first, doubled, improved = int(ctx.first_loss[0]), ctx.loss_doubled, ctx.loss_improved
    if not (first < picked.onset <= first + t.loss_window and doubled <= picked.onset):
        return None
    if improved is not None and improved <= doubled:
        return None
    layer_fails = [f for f in failures if not f.event.layer.startswith("<") and f.event.kind in _DIVERGENCE]
    kind, to = ("exploding_gradient", "exploding") if layer_fails else (ev.kind, ev.to_state)
    msg = (f"<optimizer>: {KIND_MEANING[kind]}. The loss rose from the first update on (it never fell below its first value "
           f"{fmt(ctx.first_loss[1])}); then {ev.layer}: {ev.kind.replace('_', ' ')} from step {ev.step}. Likely "
           "cause: updates that climb the loss: a sign error in a hand-written optimizer or loss (maximising "
           "instead of minimising), or a learning rate far too high. Try: checking the update's sign "
           "(p -= lr * grad) and the loss's, a much lower learning rate.")
    return attribution(ev, PSEUDO_OPTIMIZER, kind, to, first + 1, None, msg,
                        {"cause": "born_diverging", "symptom_layer": ev.layer, "symptom_kind": ev.kind})


def _burst(picked, failures, ctx: RunFacts, t: Thresholds):
    """A single-step gradient burst that the loss paid for: the first burst
    of the lr_window steps before the first failure (a divergence, a spike,
    dead units), unless a learning-rate change before it explains it. The
    layer with the largest burst of that step is the root."""
    ev = picked.event
    if ev.kind not in LR_KINDS or not ctx.bursts:
        return None
    before = [b for b in ctx.bursts if 0 < picked.onset - b[0] <= t.lr_window]
    if ev.kind in ("dead_activation", "activation_collapse"):
        # (a burst of the layer a dead or constant one feeds is its consequence: chain.py)
        before = [b for b in before if b[1] != picked.index + 1]
    if not before:
        return None
    step = min(b[0] for b in before)
    _, row, norm, prev = max((b for b in before if b[0] == step), key=lambda b: b[2])
    layer = ctx.names[row] if row < len(ctx.names) else f"<row {row}>"
    burst = Event(step=step, layer=layer, kind="exploding_gradient", from_state="healthy", to_state="exploding",
                  value=norm, severity="error", message="", extra={"confirmed_step": ev.extra.get("confirmed_step")})
    opt = _optimizer_cause(Failure(burst, row, "grad", False, step), failures, ctx, t)
    if opt is not None:
        return opt
    msg = (f"{layer}: gradient burst at step {step} (grad norm {fmt(norm)}, {fmt(norm / prev)}x "
           f"the largest it had before); then {ev.layer}: {ev.kind.replace('_', ' ')} from step {ev.step}. "
           "Likely cause: an exploding-gradient cliff (recurrent nets, long sequences) that one update crossed. "
           "Try: torch.nn.utils.clip_grad_norm_, a lower learning rate.")
    return attribution(ev, layer, "exploding_gradient", "exploding", step, norm, with_clipping(msg, ctx.clips),
                        {"cause": "gradient_burst", "value_before": prev, "symptom_layer": ev.layer,
                         "symptom_kind": ev.kind})


def _still(ev) -> str:
    """What a loss plateau or a layer's frozen weights show, for a message
    that names the rate as their cause."""
    if ev.kind == "loss_plateau":
        return f"the loss has not fallen since step {ev.step} ({fmt_change(ev.extra.get('value_before'), ev.value)})"
    return f"{ev.layer}: its weights stop changing from step {ev.step}"


def _lr_collapse(picked, failures, ctx: RunFacts, t: Thresholds):
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
    then = _still(ev)
    msg = (f"<optimizer>: the learning rate fell from {fmt(peak)} to {fmt(lr)} by step {step}; {then}. Likely "
           "cause: a schedule stepped too often (a per-epoch scheduler.step() called every batch) or decaying "
           "too fast. Try: checking where scheduler.step() is called and its step_size/gamma.")
    return attribution(ev, PSEUDO_OPTIMIZER, ev.kind, ev.to_state, step, lr, msg,
                        {"cause": "lr_collapse", "lr_before": float(peak)})


def _nothing_moves(picked, failures, ctx: RunFacts, t: Thresholds):
    """Every layer that gets a gradient is frozen: the optimizer does nothing
    to the model, and the fix is there (not in a layer)."""
    ev = picked.event
    if ev.kind != "frozen_weights" or not ctx.param_rows:
        return None
    if ev.layer == PSEUDO_OPTIMIZER:
        return None  # (the optimizer's own finding: updates negligible or collapsed)
    frozen = [f for f in failures if f.event.kind == "frozen_weights"]
    cut = {f.index for f in failures if f.event.kind == "no_gradient"}
    rows = set(ctx.param_rows) - cut
    if not rows or not rows <= {f.index for f in frozen}:
        return None
    causes = {f.event.extra.get("cause") for f in frozen}
    cause = causes.pop() if len(causes) == 1 else "no_update"
    if cause == "not_in_optimizer" and len(rows) == 1:
        # one trainable layer that the optimizer lacks (a head attached after
        # the optimizer was built, the rest frozen on purpose): the fix goes
        # to that layer's parameters, and one layer is no whole model
        # (tests/scenarios: gru_head_replaced_after_optimizer)
        return None
    why = {
        "not_in_optimizer": "the optimizer holds none of the model's parameters (it was built for another "
                            "instance of the model, or before the model was re-created)",
        "lr_zero": "the learning rate is 0 in every param group",
    }.get(cause, "no parameter changes at optimizer.step() although every layer gets a gradient (the gradients "
                 "cleared between backward() and step(), or an optimizer that holds other tensors)")
    step = min(f.onset for f in frozen)
    msg = (f"<optimizer>: no layer of the model moves from step {step}: {why}. Try: building the optimizer from "
           "model.parameters() of the model you train, once it is complete; calling zero_grad() before "
           "backward() (or after step()), never between them; a schedule that does not set the rate to 0.")
    return attribution(ev, PSEUDO_OPTIMIZER, "frozen_weights", "frozen", step, 0.0, msg,
                        {"cause": cause, "layer_count": len(rows)})


def _model_barely_moves(picked, failures, ctx: RunFacts, t: Thresholds):
    """A loss that does not fall, or a layer whose updates are negligible,
    while the whole model's median update stayed under ``update_small`` at
    every step of the run: the optimizer never let the model learn (a rate
    orders of magnitude too small), not the labels nor that one layer."""
    ev = picked.event
    if ctx.update_peak is None or ev.layer == PSEUDO_OPTIMIZER:
        return None
    if not (ev.kind == "loss_plateau" or (ev.kind == "frozen_weights"
                                          and ev.extra.get("cause") == "update_negligible")):
        return None
    step, peak, lr = ctx.update_peak
    if not peak <= t.update_small:
        return None
    then = _still(ev)
    msg = (f"<optimizer>: the whole model barely moves: its median update ||dw||/||w|| was at most {fmt(peak)} "
           f"per step in the whole run (healthy ~1e-3; highest learning rate {fmt(lr)}), and {then}. Likely cause: "
           "a learning rate orders of magnitude too small (a LambdaLR lambda that returns a rate instead of a "
           "factor, a rate divided twice, a typo such as 1e-6 for 1e-3). Try: printing "
           "optimizer.param_groups[0]['lr'] over the first steps; the rate you meant.")
    return attribution(ev, PSEUDO_OPTIMIZER, ev.kind, ev.to_state, ev.step, peak, msg,
                        {"cause": "update_small", "lr": float(lr)})


def _zero_gradient_cut(picked, failures, ctx: RunFacts, t: Thresholds):
    """Gradients that are exactly 0 below a layer whose own are not, and no
    dead or saturated layer between: that layer passes nothing on to its
    input (its effective weights are 0: a pruning mask, a multiplication by
    0) and is the root, not the first layer that starves."""
    ev = picked.event
    if ev.kind != "vanishing_gradient" or ev.value != 0.0:
        return None
    after = [r for r in ctx.param_rows if r > picked.index]
    if not after:
        return None
    row = after[0]
    if any(f.index == row and f.event.kind == "vanishing_gradient" for f in failures):
        return None
    layer = ctx.names[row] if row < len(ctx.names) else f"<row {row}>"
    msg = (f"{layer}: passes no gradient to its input from step {ev.step}: the gradients of the layers before it "
           f"are exactly 0 ({ev.layer}: {fmt_change(ev.extra.get('value_before'), 0.0)}) while its own are not. Likely "
           "cause: its effective weights are 0 (a pruning mask, a multiplication by 0, weights zeroed by hand), "
           "its output does not depend on its input, or a module before it that is not watched multiplies by 0 (a "
           "Dropout with p=1: PyTorch's p is the probability to drop, TensorFlow's keep_prob the opposite). Try: "
           "checking what was done to this layer, and what runs just before it, at that step.")
    return attribution(ev, layer, "vanishing_gradient", "vanishing", ev.step, 0.0, msg,
                        {"cause": "zero_gradient_below", "symptom_layer": ev.layer})


def extreme_before_updates(ctx: RunFacts, t: Thresholds) -> bool:
    """Gradients or activations were extreme at the first step, before any
    update, and most layers moved more than ``update_ratio_high`` within the
    ``lr_window`` steps after it: the updates are large because of what the
    layers (or the inputs) gave them, not because of the rate."""
    return bool(ctx.extreme_first) and any(h[0] <= ctx.first_step + t.lr_window for h in ctx.high_update_steps)


def inputs_explain_first_updates(ctx: RunFacts, t: Thresholds) -> bool:
    """The inputs were unnormalised (RMS above ``input_unnormalised``) before
    any update, and most layers moved more than ``update_ratio_high`` within
    the ``lr_window`` steps after the first: the inputs are upstream of the
    gradients that made those updates (DESIGN.md: a rate too high and a bad
    input differ by what was extreme before the first update)."""
    return ctx.input_rms0 > t.input_unnormalised and any(
        h[0] <= ctx.first_step + t.lr_window for h in ctx.high_update_steps)


def near_input(index: int, ctx: RunFacts) -> bool:
    """The row is the first module or the one right after it (what
    unnormalised inputs reach first)."""
    mods = ctx.module_rows
    return len(mods) > 0 and index <= mods[min(1, len(mods) - 1)]


def fault_before_updates(ctx: RunFacts, t: Thresholds) -> bool:
    """A fault visible before any update (extreme gradients or activations,
    unnormalised inputs) that explains the large first updates: they are not
    the optimizer's (docs/diagnosis.md, "Before any update")."""
    return extreme_before_updates(ctx, t) or inputs_explain_first_updates(ctx, t)


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


def attribution(symptom: Event, layer, kind, to_state, step, value, message, extra):
    """(root, Event) naming a pseudo-layer as the cause of ``symptom``."""
    ev = Event(step=int(step), layer=layer, kind=kind, from_state="healthy", to_state=to_state,
               value=value, severity=symptom.severity, message=message,
               extra={**extra, "attribution": True,
                      "confirmed_step": symptom.extra.get("confirmed_step", int(symptom.step))})
    return {"kind": kind, "layer": layer, "step": int(step), "message": message}, ev


def _unscaled_targets(picked, failures, ctx: RunFacts, t: Thresholds):
    """A divergence whose gradients were already extreme before any update,
    on regression targets far from unit scale (their std above
    ``input_unnormalised``, the bound unnormalised inputs are judged by) and
    inputs that are not: under MSE the loss and its gradient at the output
    scale with the targets from step 0, so the root is the targets
    (``<loss>``), as unnormalised inputs are ``<input>`` (docs/diagnosis.md,
    "Targets off unit scale")."""
    ev = picked.event
    tv = ctx.target_var
    if ev.kind not in _DIVERGENCE | {"loss_spike"} or not tv == tv or ev.layer == PSEUDO_LOSS:
        return None
    if not (math.sqrt(tv) > t.input_unnormalised and ctx.extreme_first):
        return None
    if ctx.input_rms0 > t.input_unnormalised or picked.onset > ctx.first_step + t.lr_window:
        return None
    msg = (f"<loss>: {KIND_MEANING['exploding_gradient']}. The regression targets are far from unit scale "
           f"(std {fmt(math.sqrt(tv))}): the loss and its gradient at the output were extreme at the first step, "
           f"before any update; then {ev.layer}: {ev.kind.replace('_', ' ')} from step {ev.step}. Try: "
           "standardising the targets (subtract their mean, divide by their std; undo it for reporting), "
           "or a loss on that scale.")
    return attribution(ev, PSEUDO_LOSS, "exploding_gradient", "exploding", ctx.first_step, math.sqrt(tv), msg,
                        {"cause": "unscaled_targets", "symptom_layer": ev.layer, "symptom_kind": ev.kind})


def _saturated_not_cut(picked, failures, ctx: RunFacts, t: Thresholds):
    """Gradients exactly 0 on a layer whose output is pinned at the bound of
    a tanh-like range (the gradient aspect's ``saturated_output``): the
    derivative there is exactly 0 in float32, so the layer is saturated, not
    cut off from the loss; and when it is next to an input far from unit
    scale, the root is the inputs (docs/diagnosis.md, "Zero gradients of a
    saturated layer")."""
    ev = picked.event
    if ev.kind != "no_gradient" or not ev.extra.get("saturated_output"):
        return None
    near = near_input(picked.index, ctx)
    rms0 = ctx.input_rms0
    seen = f"{ev.layer}: its output is at +-1 and its parameters' gradients are exactly 0 from step {ev.step}"
    if near and rms0 > t.input_unnormalised:
        msg = (f"The inputs are not normalised (RMS {fmt(rms0)} in the first batch): {seen} (saturated: the "
               "derivative of tanh/sigmoid at +-1 is 0). Try: normalising the inputs to mean 0 and std 1.")
        return attribution(ev, PSEUDO_INPUT, "saturated_activation", "saturated", ev.step, rms0, msg,
                            {"cause": "unnormalised_input", "direction": "too_large", "symptom_layer": ev.layer})
    msg = (f"{seen} (saturated: the derivative of tanh/sigmoid at +-1 is 0, not a missing gradient path). Try: "
           "normalising what it receives (its inputs, a LayerNorm before it), a smaller initialisation.")
    return attribution(ev, ev.layer, "saturated_activation", "saturated", ev.step, 1.0, msg,
                        {"cause": "saturated_output", "symptom_kind": ev.kind})


def _born_in_closing_parent(picked, failures, ctx: RunFacts, t: Thresholds):
    """A module whose input is non-finite while the module before it in
    forward order gave a finite output: the value is born in the code that
    ran between them. When that module's parent does not also hold this one,
    the first code to run after it is the rest of its parent's forward (which
    must return before this module is called): the parent is where the value
    is born, first in execution order (a softmax over an all ``-inf`` row in a
    hand-written attention layer; docs/diagnosis.md, "Born between modules")."""
    ev = picked.event
    if ev.kind != "nonfinite" or ev.extra.get("side") != "forward" or not ev.extra.get("input_nonfinite"):
        return None
    if ev.extra.get("from_layer"):
        return None
    before = [r for r in ctx.module_rows if r < picked.index]
    if not before or before[-1] >= len(ctx.names):
        return None
    prev = ctx.names[before[-1]]
    parent = prev.rpartition(".")[0]
    if not parent or ev.layer == parent or ev.layer.startswith(parent + "."):
        return None
    msg = (f"{parent}: non-finite output from step {ev.step}: the output of {prev} (its last watched submodule) "
           f"is finite, the input of {ev.layer} is not, and {parent}'s forward runs in between (a functional op "
           "there: a softmax over a row that is all -inf, a log/sqrt of a non-positive value, a division by ~0). "
           "Try: guarding that op (a mask that leaves at least one entry per row, a clamp or an eps), and "
           "torch.autograd.detect_anomaly() on one step for the op's traceback.")
    return attribution(ev, parent, "nonfinite", "nonfinite", ev.step, ev.value, msg,
                        {"cause": "born_in_parent", "symptom_layer": ev.layer, "after": prev})


#: the rules, in the order the root cause tries them
RULES = (_scaler_origin, _born_in_closing_parent, _unscaled_targets, _saturated_not_cut,
         _optimizer_cause, _born_diverging, _burst, _lr_collapse, _nothing_moves,
         _zero_gradient_cut, _model_barely_moves)
