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
     passed on to its input, are not: ``gout_nonfinite``), ``<loss>`` when
     the module that feeds a finite loss already received it (born in the
     loss's backward), else the deepest layer with non-finite gradients
     (backward runs from the loss toward the input);
   - exploding: an activation explosion before the gradients it inflates (the
     first in forward order), then the highest gradient norm;
   - vanishing: the deepest dead, saturated or constant layer below which
     gradients vanish (of a chain of such layers, each fed by the one before,
     its first link: the one whose input is alive); without one, the deepest
     vanishing layer (it spreads toward the input); dead/saturated/constant
     layers alone: the first in forward order;
   - no gradient / frozen: the highest (closest to the loss) cut-off layer,
     where the cut is;
   - a layer fed by a dead or constant layer (the row before it): its
     exploding gradient or activations are that layer's consequence, however
     severe, and the dead or constant layer is the root (chain.py);
   - then the loss's own failures (initial loss, spike, plateau). An
     initial loss far from ln K, or a plateau from before, that the loss
     then fell from does not compete with a failure that comes after the
     fall (it did not prevent learning). A plateau from the run's first
     step that is alone at the earliest onset yields to a module failing
     within its first ``plateau_window`` steps: that failure is why the loss
     never fell (``_why_it_never_fell``).
2. Causes around the first failing layer (causes/, its RULES tried in order; each
   is an Event of its own, an *attribution*, so that the root cause's
   (kind, layer, step) is always an event of the timeline):
   - a GradScaler whose scale collapsed: where the inf/NaN is born (a
     module's forward or backward, or the loss's backward);
   - ``<optimizer>``: a failure within the window after a change of a param
     group's hyperparameters (the rate, the weight decay, whose window is
     the time it takes to shrink the weights tenfold, the momentum), a
     schedule that kept raising the rate, a step where most layers moved by
     more than ``update_ratio_high`` of their norm (not born failing), a
     loss that rose from the first update (never fell), a rate that fell to
     a thousandth of its peak before a plateau, or no layer moving at all
     (the optimizer holds none of them, every rate is 0, the gradients were
     cleared before ``step()``); named ``exploding_gradient`` when the layers
     diverged, else the symptom's kind;
   - a single-step gradient burst that the loss paid for: its layer;
   - gradients exactly 0 below a layer whose own are not: that layer;
   - ``<input>`` when a layer next to the input is failing from the first
     step, or the loss is far from its initial value at step 0, or the
     layers' gradients were extreme before the first (too large) update, and
     the first batch is far from unit scale (unnormalised inputs); extreme
     gradients or activations at the first step also keep the large updates
     that follow from being blamed on the rate.
3. An activation explosion none of those explains was born where its growth
   began (aspects/growth.py): the first module an order of magnitude above
   the batch at the explosion's first step, or the first whose output grew
   tenfold over its own first measurement before it.
"""

from __future__ import annotations

from ..format.metadata import PSEUDO_INPUT
from .causes import (LR_KINDS, RULES, RunFacts, attribution, extreme_before_updates, inputs_explain_first_updates,
                     near_input)
from .chain import (ACTIVATION_KINDS, Failure, explained_by_blind_input, explained_by_blockers, explained_by_frozen,
                    pick)
from .events import Event
from .explain import advice_first, fmt, input_scale_message, integer_input_note
from .thresholds import Thresholds

__all__ = ["Failure", "RunFacts", "find_root_cause"]

# failures of the first layers that unnormalised inputs produce
_INPUT_KINDS = {"saturated_activation", "activation_explosion", "exploding_gradient",
                "dead_activation"}


def find_root_cause(failures, ctx: RunFacts, t: Thresholds) -> tuple[dict | None, Event | None]:
    """See :func:`_find_root_cause`; the root cause's message leads with what
    to try (the tab shows it after "What to try:"), its event's keeps the
    order of the timeline (what was seen first)."""
    root, ev = _find_root_cause(failures, ctx, t)
    if root is not None:
        root = {**root, "message": advice_first(root["message"])}
    return root, ev


def _find_root_cause(failures, ctx: RunFacts, t: Thresholds) -> tuple[dict | None, Event | None]:
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
    # a loss that started far from ln K, or stood still from the start, but
    # then fell does not explain a failure that comes after it fell (ArcFace's
    # margin, CLIP's temperature start high on purpose; a NaN later is its
    # own): the others compete (tests/test_demo.py: amp_scaler)
    fell = ctx.loss_improved
    if fell is not None and any(not _fell_since(f, fell) and f.onset >= fell for f in failures):
        failures = [f for f in failures if not _fell_since(f, fell)]
    first = min(f.onset for f in failures)
    first = _why_it_never_fell(failures, first, ctx, t)
    group = explained_by_frozen([f for f in failures if f.earliest <= first + t.tie_window], failures)
    group = explained_by_blind_input(explained_by_blockers(group), ctx.blind_rows)
    first_link = pick(group)
    ev = first_link.event
    message = ev.message
    upstream = sorted({f.event.layer for f in group if f.event.kind == "vanishing_gradient"
                       and f.index < first_link.index and f is not first_link})
    if upstream and ev.kind in ACTIVATION_KINDS:
        message = (f"{message} It blocks the gradient: {len(upstream)} layer(s) before it have "
                   f"vanishing gradients.")
    # the step of the picked event itself (not the tie group's earliest onset,
    # which may belong to a consequence measured sooner), so that the root
    # cause is an event of the timeline
    root = {"kind": ev.kind, "layer": ev.layer, "step": int(ev.step), "message": message}
    for rule in RULES:
        found = rule(first_link, failures, ctx, t)
        if found is not None:
            return found
    # unnormalised inputs: a layer next to the input failing from the first
    # step, or a loss far from its initial value from the first step (the
    # first layers' outputs, hence the logits, scale with the inputs)
    unnorm_symptom = (first_link.born and ev.kind in _INPUT_KINDS and not ev.layer.startswith("<")
                      and near_input(first_link.index, ctx)) or \
        (ev.kind == "initial_loss" and ev.step == 0 and ctx.input_rms0 > t.input_unnormalised)
    # ... or updates too large from the first updates on, on inputs that
    # were unnormalised before any update: the inputs are upstream of the
    # gradients that made the updates (a rate that would be fine on
    # normalised inputs; DESIGN.md separates it from a rate too high)
    large_first = ev.kind in LR_KINDS and (
        (extreme_before_updates(ctx, t) and ctx.input_rms0 > t.input_unnormalised)
        or inputs_explain_first_updates(ctx, t))
    unnorm_symptom = unnorm_symptom or large_first
    if ev.layer.startswith("<") and not unnorm_symptom:
        return root, None
    if unnorm_symptom:
        rms0 = ctx.input_rms0
        if rms0 == rms0 and (rms0 > t.input_unnormalised or rms0 < 1.0 / t.input_unnormalised):
            msg = (f"The inputs are not normalised (RMS {fmt(rms0)} in the first batch) and "
                   f"{ev.layer}: {ev.kind.replace('_', ' ')} from the first step. Try: normalising "
                   "the inputs to mean 0 and std 1.")
            if large_first:
                msg = input_scale_message(rms0, ev, extreme_before_updates(ctx, t))
            msg += integer_input_note(ctx.input_integers, ctx.input_absmax0)
            kind, to, extra = ev.kind, ev.to_state, {"cause": "unnormalised_input", "direction": "too_large"}
            if rms0 < 1.0 / t.input_unnormalised:
                # inputs far below unit scale: whatever the first layers show
                # (a bias-dominated output, a gain over a near-zero signal) is
                # no explosion; the finding is the batch's scale, too small
                # (docs/diagnosis.md, "Which way the inputs are off")
                kind, to, extra["direction"] = "data_anomaly", "data_anomaly", "too_small"
                msg = (f"The inputs are far below unit scale (RMS {fmt(rms0)} in the first batch: scaled twice, "
                       f"e.g. divided by 255 twice?) and {ev.layer}: {ev.kind.replace('_', ' ')} from the first "
                       "step. Try: normalising the inputs to mean 0 and std 1 (scale them once).")
            return attribution(ev, PSEUDO_INPUT, kind, to, ev.step, rms0, msg, extra)
    if ev.kind == "activation_explosion" and ev.extra.get("growth_from"):
        return _growth_origin(ev)
    return root, None


def _why_it_never_fell(failures, first: int, ctx: RunFacts, t: Thresholds) -> int:
    """The onset the root cause is looked for at: ``first``, unless the
    only failures there are a loss that never fell (a plateau from the run's
    first step). That plateau says what the user sees, not why: its onset is
    "from the start" only to the resolution of its level, a median of
    ``plateau_window`` losses. A layer's failure that begins within that
    window is why the loss could not fall (a custom backward that kills the
    gradient, units that die): its onset is where to look, and the plateau
    is its consequence (tests/test_diagnosis_plateau.py)."""
    if ctx.first_loss is None:
        return first
    start = int(ctx.first_loss[0])
    at_first = [f for f in failures if f.earliest <= first + t.tie_window]
    if not all(f.event.kind == "loss_plateau" and f.onset <= start for f in at_first):
        return first
    why = [f.onset for f in failures if not f.event.layer.startswith("<")
           and f.onset < start + t.plateau_window]
    return min(why) if why else first


def _fell_since(f: Failure, fell: int) -> bool:
    """The loss's own finding from before the step it clearly fell (its
    initial value, a plateau from before): the loss recovered from it."""
    return f.event.kind == "initial_loss" or (f.event.kind == "loss_plateau" and f.onset < fell)


def _growth_origin(ev) -> tuple[dict, Event]:
    """An explosion that crossed its threshold at a later module was born
    where the growth began (aspects/growth.py): that module, at that step."""
    layer, step = ev.extra["growth_from"], int(ev.extra["growth_step"])
    how = ("its output grew tenfold over its first measurement first"
           if step < ev.step else "its output is the first one ten times the batch's scale")
    msg = (f"{layer}: the activations' growth begins here ({how}, step {step}); it compounds "
           f"through the modules after it and explodes at {ev.layer} from step {int(ev.step)}. "
           "Likely cause: this module's initialisation or what drives its output up (a gain "
           "above 1 at every module, a skip path added more than once, an objective that rewards a "
           "large output). Try: a "
           "standard initialisation (Kaiming/Xavier), normalisation layers, checking the forward "
           "pass and the loss at this module.")
    return attribution(ev, layer, ev.kind, ev.to_state, step, ev.value, msg, {"cause": "growth_onset",
                                                                               "symptom_layer": ev.layer})
