"""Causes around the picked failure: rules that name, instead of the first
failing layer, what made it fail.

A cause rule is a function ``rule(picked, failures, ctx, t)`` of the picked
failure (a :class:`~..chain.Failure`), all the run's failures, the run's
facts (:class:`RunFacts`) and the thresholds; it returns ``(root,
attribution Event)`` or None. The root cause (rootcause.py) tries them in
``RULES`` order and the first that answers wins:

1. ``origin.scaler_origin``: a collapsed GradScaler scale: where its inf/NaN is born;
2. ``origin.born_in_closing_parent``: a non-finite input after a finite
   output: the parent whose forward runs in between;
3. ``targets.unscaled_targets``: a divergence on regression targets far from unit scale: ``<loss>``;
4. ``origin.saturated_not_cut``: zero gradients of a layer saturated at +-1
   (``<input>`` when unnormalised inputs reach it);
5. ``optimizer.optimizer_cause``: a change of a hyperparameter, a rate that
   kept rising, a step where most layers moved far: ``<optimizer>``;
6. ``optimizer.born_diverging``: a loss that rose from the first update on: ``<optimizer>``;
7. ``origin.gradient_burst``: a single-step gradient burst that the loss paid for: its layer;
8. ``optimizer.lr_collapse``: a plateau after a schedule took the rate to
   a thousandth of its peak: ``<optimizer>``;
9. ``movement.nothing_moves``: no layer of the model moves: ``<optimizer>``;
10. ``movement.zero_gradient_cut``: gradients exactly 0 below a layer: that layer;
11. ``movement.model_barely_moves``: the whole model's updates negligible
    over the run: ``<optimizer>``.

facts.py holds what they share: :class:`RunFacts`, the kind sets, the
predicates about faults before any update, :func:`attribution`.
"""

from __future__ import annotations

from .facts import (DECAY_KINDS, LR_KINDS, RunFacts, attribution, extreme_before_updates, fault_before_updates,
                    inputs_explain_first_updates, near_input)
from .movement import model_barely_moves, nothing_moves, zero_gradient_cut
from .optimizer import born_diverging, lr_collapse, optimizer_cause
from .origin import born_in_closing_parent, gradient_burst, saturated_not_cut, scaler_origin
from .targets import unscaled_targets

__all__ = ["DECAY_KINDS", "LR_KINDS", "RULES", "RunFacts", "attribution", "extreme_before_updates",
           "fault_before_updates", "inputs_explain_first_updates", "near_input"]

#: the rules, in the order the root cause tries them
RULES = (scaler_origin, born_in_closing_parent, unscaled_targets, saturated_not_cut,
         optimizer_cause, born_diverging, gradient_burst, lr_collapse, nothing_moves,
         zero_gradient_cut, model_barely_moves)
