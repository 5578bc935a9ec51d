"""What every cause rule reads and shares: :class:`RunFacts` (the read-only
summary of the run besides its failures, that the classifier builds when the
root cause asks), the sets of failure kinds a rate too high, a weight decay
too large and a diverging optimisation produce, the predicates that tell a
fault visible before any update from the optimizer's own (the inputs, the
first layers), and :func:`attribution`, which turns a rule's finding into
the ``(root, Event)`` pair every rule returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..events import Event
from ..explain import fmt_change
from ..thresholds import Thresholds

__all__ = ["DECAY_KINDS", "DIVERGENCE", "LR_KINDS", "RunFacts", "attribution", "extreme_before_updates",
           "fault_before_updates", "inputs_explain_first_updates", "near_input", "still_message"]


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
    #: module rows whose output was the same for every sample from their
    #: first measurement while their input differed (aspects/samples.py)
    blind_rows: tuple = ()


# failures a learning rate too high produces in the layers
LR_KINDS = {"exploding_gradient", "activation_explosion", "nonfinite", "dead_activation",
            "saturated_activation", "activation_collapse", "loss_spike"}
# failures that a large weight decay produces (weights shrinking to nothing)
DECAY_KINDS = LR_KINDS | {"vanishing_gradient", "loss_plateau"}

#: symptoms of a diverging optimisation (the updates blow the weights up)
DIVERGENCE = {"exploding_gradient", "activation_explosion", "nonfinite"}


def still_message(ev) -> str:
    """What a loss plateau or a layer's frozen weights show, for a message
    that names the rate as their cause."""
    if ev.kind == "loss_plateau":
        return f"the loss has not fallen since step {ev.step} ({fmt_change(ev.extra.get('value_before'), ev.value)})"
    return f"{ev.layer}: its weights stop changing from step {ev.step}"


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


def attribution(symptom: Event, layer, kind, to_state, step, value, message, extra):
    """(root, Event) naming a pseudo-layer as the cause of ``symptom``."""
    ev = Event(step=int(step), layer=layer, kind=kind, from_state="healthy", to_state=to_state,
               value=value, severity=symptom.severity, message=message,
               extra={**extra, "attribution": True,
                      "confirmed_step": symptom.extra.get("confirmed_step", int(symptom.step))})
    return {"kind": kind, "layer": layer, "step": int(step), "message": message}, ev
