"""Rules for a model that does not move, or passes nothing on: every layer
frozen (the optimizer holds none of them, every rate is 0, the gradients
cleared before ``step()``: ``<optimizer>``), the whole model's updates
negligible over the run (a rate orders of magnitude too small:
``<optimizer>``), and gradients exactly 0 below a layer whose own are not
(that layer cuts the gradient path and is the root, not the first layer that
starves).
"""

from __future__ import annotations

from ...format.metadata import PSEUDO_OPTIMIZER
from ..explain import fmt, fmt_change
from ..thresholds import Thresholds
from .facts import RunFacts, attribution, still_message

__all__ = ["model_barely_moves", "nothing_moves", "zero_gradient_cut"]


def nothing_moves(picked, failures, ctx: RunFacts, t: Thresholds):
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


def model_barely_moves(picked, failures, ctx: RunFacts, t: Thresholds):
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
    then = still_message(ev)
    msg = (f"<optimizer>: the whole model barely moves: its median update ||dw||/||w|| was at most {fmt(peak)} "
           f"per step in the whole run (healthy ~1e-3; highest learning rate {fmt(lr)}), and {then}. Likely cause: "
           "a learning rate orders of magnitude too small (a LambdaLR lambda that returns a rate instead of a "
           "factor, a rate divided twice, a typo such as 1e-6 for 1e-3). Try: printing "
           "optimizer.param_groups[0]['lr'] over the first steps; the rate you meant.")
    return attribution(ev, PSEUDO_OPTIMIZER, ev.kind, ev.to_state, ev.step, peak, msg,
                        {"cause": "update_small", "lr": float(lr)})


def zero_gradient_cut(picked, failures, ctx: RunFacts, t: Thresholds):
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
