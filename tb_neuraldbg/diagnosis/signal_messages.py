"""The messages of the events judged by what a module does to the signal
(``diagnosis/aspects/gain.py``) and whether its units differ
(``aspects/units.py``): events whose ``extra["signal"]`` names the metric.
:func:`explain.event_message` words them with :func:`signal_head` and
advises from ``SIGNAL_ADVICE`` (by the event's ``extra["cause"]``), as
:mod:`.explain` does every other event.
"""

from __future__ import annotations

import math

from .numbers import fmt

__all__ = ["SIGNAL_ADVICE", "signal_head"]

_GAIN_WORDS = {
    "fwd_gain": "forward gain (std of its output over std of its input)",
    "bwd_gain": "backward gain (norm of the gradient it passes to its input over the norm it receives)",
}
_GAIN_ONSET = {
    "activation_explosion": "the activations start to explode here",
    "activation_collapse": "the activations collapse here",
    "exploding_gradient": "the gradient starts to explode here (going backward)",
    "vanishing_gradient": "the gradient starts to vanish here (going backward)",
}


def signal_head(kind: str, where: str, step: int, value, extra: dict) -> str | None:
    """The first sentence of an event judged by a module's gain or unit
    spread (``extra["signal"]``); None for any other event."""

    signal = extra.get("signal")
    if signal == "unit_spread":
        return (f"{where}: its output units are all the same from step {step} (unit spread {fmt(value)}; "
                "healthy layers are near 1): it passes on one feature at most.")
    if signal == "sample_spread":
        return _samples_head(where, step, value, extra)
    if signal not in _GAIN_WORDS or kind not in _GAIN_ONSET:
        return None
    med = extra.get("network_median")
    vs = (f", {fmt(value / med)}x the median of the network's modules ({fmt(med)})"
          if _finite(value) and _finite(med) and med else "")
    return f"{where}: {_GAIN_ONSET[kind]} from step {step}: its {_GAIN_WORDS[signal]} is {fmt(value)}{vs}."


def _samples_head(where: str, step: int, value, extra: dict) -> str:
    """An output that stopped differing between samples (aspects/samples.py)."""
    first = extra.get("value_before")
    b, b0 = extra.get("between_std"), extra.get("between_std_first")
    nums = f"sample spread {fmt(value)}" + (f", {fmt(first)} at first" if _finite(first) else "")
    if _finite(b) and _finite(b0):
        nums = f"std between samples {fmt(b)}, {fmt(b0)} at first; {nums}"
    return (f"{where}: its output has stopped differing between the samples of the batch from step {step} "
            f"({nums}) while its input still differs, and the model's output lost that too: the representation "
            "collapsed (every input maps to about one point), so nothing after it can tell the inputs apart, "
            "whatever the loss says.")


def _finite(x) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


#: the likely cause and what to try, by (kind, extra["cause"]) (explain.BY_CAUSE)
SIGNAL_ADVICE = {
    ("exploding_gradient", "module_gain"): (
        "Likely cause: this module multiplies the gradient it passes back (a custom autograd Function's "
        "backward, a scale applied in backward only, weights initialised far too large). Try: checking its "
        "backward against autograd (torch.autograd.gradcheck), its initialisation and its scale factors."),
    ("vanishing_gradient", "module_gain"): (
        "Likely cause: this module shrinks the gradient it passes back by orders of magnitude (a custom "
        "backward, a scale applied in backward only, weights initialised near zero). Try: checking its "
        "backward against autograd (torch.autograd.gradcheck), its initialisation and its scale factors."),
    ("activation_explosion", "module_gain"): (
        "Likely cause: its weights or its scale are orders of magnitude too large (an initialisation "
        "multiplied by mistake, a missing 1/sqrt(d) scale). Try: a standard initialisation "
        "(Kaiming/Xavier) and checking its scale factors."),
    ("activation_collapse", "module_gain"): (
        "Likely cause: its weights or its scale are orders of magnitude too small (an initialisation "
        "divided by mistake, a scale of ~0). Try: a standard initialisation (Kaiming/Xavier) and checking "
        "its scale factors."),
    ("activation_collapse", "samples_alike"): (
        "Likely cause: the objective is best met by ignoring the input. A contrastive or Siamese loss "
        "without a term that pushes different inputs apart (negatives, a margin on negative pairs), or "
        "triplets mined hardest-first from the start; self-distillation without a predictor, stop-gradient "
        "or centering; a VAE whose KL term outweighs the reconstruction (KL summed, reconstruction "
        "averaged: posterior collapse); a rate so high that the weights fall to the trivial solution. "
        "Try: negatives (or a variance term, VICReg), semi-hard or batch-all mining, KL annealing or a "
        "lower KL weight, the reconstruction summed as the KL is, a lower learning rate."),
    ("activation_collapse", "identical_units"): (
        "Likely cause: its weight rows, or the units it receives, are all equal: a constant "
        "initialisation (nn.init.constant_), one row broadcast to all, or an expand where a per-unit "
        "value was meant. Equal units get equal gradients and stay equal. Try: a random initialisation "
        "(Kaiming/Xavier) of its weights."),
}
