"""Rules that name where a failure is born rather than where it shows: the
op whose inf/NaN collapsed a GradScaler's scale, the parent module whose
forward runs between a finite output and a non-finite input, the layer of a
single-step gradient burst that the loss paid for (unless a change of the
rate explains it: :func:`.optimizer.optimizer_cause`), and a layer whose
zero gradients come from an output saturated at +-1, not from a cut path.
"""

from __future__ import annotations

from ...format.metadata import PSEUDO_INPUT, PSEUDO_LOSS
from ..chain import Failure
from ..events import Event
from ..explain import fmt, fmt_change, with_clipping
from ..thresholds import Thresholds
from .facts import LR_KINDS, RunFacts, attribution, near_input
from .optimizer import optimizer_cause

__all__ = ["born_in_closing_parent", "gradient_burst", "saturated_not_cut", "scaler_origin"]


def scaler_origin(picked, failures, ctx: RunFacts, t: Thresholds):
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


def gradient_burst(picked, failures, ctx: RunFacts, t: Thresholds):
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
    opt = optimizer_cause(Failure(burst, row, "grad", False, step), failures, ctx, t)
    if opt is not None:
        return opt
    msg = (f"{layer}: gradient burst at step {step} (grad norm {fmt(norm)}, {fmt(norm / prev)}x "
           f"the largest it had before); then {ev.layer}: {ev.kind.replace('_', ' ')} from step {ev.step}. "
           "Likely cause: an exploding-gradient cliff (recurrent nets, long sequences) that one update crossed. "
           "Try: torch.nn.utils.clip_grad_norm_, a lower learning rate.")
    return attribution(ev, layer, "exploding_gradient", "exploding", step, norm, with_clipping(msg, ctx.clips),
                        {"cause": "gradient_burst", "value_before": prev, "symptom_layer": ev.layer,
                         "symptom_kind": ev.kind})


def saturated_not_cut(picked, failures, ctx: RunFacts, t: Thresholds):
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


def born_in_closing_parent(picked, failures, ctx: RunFacts, t: Thresholds):
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
