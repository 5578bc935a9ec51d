"""The rule for regression targets far from unit scale: under MSE the loss
and its gradient at the output scale with the targets from step 0, so a
divergence whose gradients were extreme before any update, on inputs that
are not, is blamed on the targets (``<loss>``), as unnormalised inputs are
on ``<input>`` (docs/diagnosis.md, "Targets off unit scale").
"""

from __future__ import annotations

import math

from ...format.metadata import PSEUDO_LOSS
from ..explain import KIND_MEANING, fmt
from ..thresholds import Thresholds
from .facts import DIVERGENCE, RunFacts, attribution

__all__ = ["unscaled_targets"]


def unscaled_targets(picked, failures, ctx: RunFacts, t: Thresholds):
    """A divergence whose gradients were already extreme before any update,
    on regression targets far from unit scale (their std above
    ``input_unnormalised``, the bound unnormalised inputs are judged by) and
    inputs that are not: under MSE the loss and its gradient at the output
    scale with the targets from step 0, so the root is the targets
    (``<loss>``), as unnormalised inputs are ``<input>`` (docs/diagnosis.md,
    "Targets off unit scale")."""
    ev = picked.event
    tv = ctx.target_var
    if ev.kind not in DIVERGENCE | {"loss_spike"} or not tv == tv or ev.layer == PSEUDO_LOSS:
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
