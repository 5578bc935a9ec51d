"""Plain-language messages: what happened, the likely cause, what to try.

Pure string formatting; every function takes plain values so the offline
diagnosis and the online engine word things identically.
"""

from __future__ import annotations

import math

__all__ = ["CAUSES", "event_message", "fmt"]


def fmt(x) -> str:
    """A compact number: 3 significant digits, 'nan'/'inf' spelled out."""
    if x is None:
        return "n/a"
    x = float(x)
    if math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x != 0 and (abs(x) >= 1e4 or abs(x) < 1e-3):
        return f"{x:.2e}"
    return f"{x:.3g}"


def _pct(x) -> str:
    if x is None or not math.isfinite(float(x)):
        return "n/a"
    return f"{100 * float(x):.0f}%"


#: the likely cause and what to try, per event kind, after the message head.
#: "nonfinite" and "data_anomaly" have none: their cause depends on the event
#: (where the value was born, what is wrong with the batch), so each variant
#: of their head says it.
CAUSES = {
    "vanishing_gradient": (
        "Likely cause: saturating or dead activations after it, a poor initialisation, or a deep "
        "stack without normalisation or residual paths. Try: ReLU/GELU instead of sigmoid/tanh, "
        "Kaiming/Xavier initialisation, BatchNorm/LayerNorm, residual connections."
    ),
    "exploding_gradient": (
        "Likely cause: a learning rate too high, a large initialisation, or missing "
        "normalisation. Try: torch.nn.utils.clip_grad_norm_, a lower learning rate or a warmup, "
        "checking this layer's initialisation."
    ),
    "dead_activation": (
        "Likely cause: pre-activations pushed negative (a negative bias, or a large update from a "
        "high learning rate). Try: LeakyReLU/GELU, BatchNorm before the activation, a lower "
        "learning rate, checking the bias initialisation."
    ),
    "saturated_activation": (
        "Gradients through saturated units are ~0. Likely cause: pre-activations too large "
        "(initialisation, unnormalised inputs, a high learning rate). Try: normalising the inputs, "
        "BatchNorm/LayerNorm before it, a smaller initialisation, ReLU/GELU."
    ),
    "activation_collapse": (
        "Likely cause: a dead or saturated layer before it, a constant input, or weights "
        "collapsed to zero. Try: checking the layers before it and the input pipeline."
    ),
    "activation_explosion": (
        "Likely cause: a large initialisation (of this layer or the ones before it), "
        "unnormalised inputs, or a learning rate too high. Try: a standard initialisation (Kaiming/Xavier), normalisation layers, "
        "a lower learning rate."
    ),
    "no_gradient": (
        "Likely cause: its output is cut from the loss (.detach(), .data, torch.no_grad(), a "
        "round-trip through .item()/numpy) or not used by the loss. Try: removing the detach; "
        "check that the forward pass connects this layer to the loss."
    ),
    "frozen_weights": (
        "Likely cause: its parameters are not in the optimizer (the optimizer was built before "
        "the layer existed, or a parameter group is missing). Try: building the optimizer from "
        "model.parameters() once the model is complete."
    ),
    "loss_spike": (
        "Likely cause: a learning rate too high, an outlier batch, or the start of a divergence. "
        "Try: gradient clipping, a lower learning rate, inspecting that batch."
    ),
    "loss_plateau": (
        "Gradients flow but the loss does not fall. Likely cause: labels unrelated to the inputs "
        "(a shuffled or misaligned label pipeline), a learning rate far too low, or an output that "
        "does not fit the loss (e.g. a softmax before CrossEntropyLoss). Try: overfitting a single "
        "batch, checking the labels."
    ),
    "initial_loss": (
        "Likely cause: logits scaled up at initialisation (a large init of the last layer), a "
        "missing or doubled softmax, or a loss summed instead of averaged. Try: a smaller init of "
        "the last layer; pass raw logits to CrossEntropyLoss."
    ),
    "scaler_collapse": (
        "Persistent inf/NaN in the graph: lowering the scale cannot fix an overflow that is not "
        "caused by the scale. Try: computing that op in float32 (torch.autocast(enabled=False)), "
        "bf16, or fixing the op's inputs."
    ),
}


def event_message(kind: str, layer: str, layer_type: str, from_state: str, to_state: str,
                  step: int, value, before, extra: dict | None = None) -> str:
    """The message of one event (failure or recovery)."""
    extra = extra or {}
    where = f"{layer} ({layer_type})" if layer_type and not layer.startswith("<") else layer
    if extra.get("note") == "harmless_burst":
        return (f"{where}: gradient burst at step {step} (grad norm {fmt(value)}, {fmt(value / before)}x the "
                f"largest it had before); no failure followed in the next {extra.get('window')} steps. The norms are "
                "measured before clipping: if you clip gradients, the clip is doing its job.")
    if to_state == "healthy":
        return (f"{where}: recovered from {from_state} at step {step} "
                f"({fmt(before)} -> {fmt(value)}).")
    head = _head(kind, where, from_state, to_state, step, value, before, extra)
    return f"{head} {CAUSES.get(kind, '')}".strip()


def _head(kind, where, from_state, to_state, step, value, before, extra) -> str:
    if kind == "vanishing_gradient":
        return (f"{where}: gradient vanishing from step {step} (grad norm {fmt(before)} -> "
                f"{fmt(value)}, orders of magnitude below the layers after it).")
    if kind == "exploding_gradient":
        return f"{where}: gradient exploding from step {step} (grad norm {fmt(before)} -> {fmt(value)})."
    if kind == "nonfinite":
        side = extra.get("side")
        if side == "backward":
            if extra.get("forward_nonfinite"):
                return (f"{where}: non-finite gradient from step {step}; the forward pass was "
                        "already non-finite at that step, so the gradient follows from it: look "
                        "for where the forward values first turned non-finite.")
            if extra.get("received"):
                return (f"{where}: non-finite gradient from step {step}, received from the layers "
                        "after it (the gradient w.r.t. its output was already non-finite) while the "
                        "forward pass was finite.")
            if extra.get("bwd_origin"):
                what = {"input": "the gradient it passes on to its input is",
                        "both": "its parameters' gradients and the gradient it passes on to its "
                                "input are"}.get(extra.get("via"), "its parameters' gradients are")
                return (f"{where}: non-finite gradient born in this module's backward from step "
                        f"{step}: the gradient w.r.t. its output was finite but {what} not, "
                        "while the forward pass was finite. Check the backward of its ops "
                        "(division by ~0, sqrt/log/pow near 0, a custom autograd Function).")
            return (f"{where}: non-finite gradient from step {step} while the forward pass was "
                    "finite. In backward it appears at or just after this layer: check the backward "
                    "of the ops that follow it (division by ~0, sqrt/log/pow near 0, a custom "
                    "autograd Function).")
        if side == "loss":
            if extra.get("from_layer"):
                return (f"{where}: the loss is non-finite from step {step}; its input, the output "
                        f"of {extra['from_layer']}, was already non-finite.")
            return (f"{where}: the loss is non-finite from step {step}. Check the loss inputs "
                    "(log of zero probabilities, targets out of range, division by ~0).")
        if extra.get("from_layer"):
            return (f"{where}: non-finite output from step {step}; its input was already "
                    f"non-finite, received from {extra['from_layer']} (the value was born "
                    "before this module).")
        if extra.get("input_nonfinite"):
            return (f"{where}: non-finite output from step {step}; its input was already "
                    "non-finite, so the value is born in the code just before this module "
                    "(a functional op in the parent's forward).")
        return (f"{where}: non-finite output from step {step} while its input was finite: the "
                "value is born inside this module. Check its ops and their inputs (log/sqrt of "
                "non-positive values, division by ~0, exp or fp16 overflow).")
    if kind == "dead_activation":
        after = (" after the activation applied to its output in forward (a functional ReLU)"
                 if extra.get("via") == "functional_activation" else "")
        return (f"{where}: {_pct(value)} of its units are zero for every sample{after} from step "
                f"{step} (was {_pct(before)}).")
    if kind == "saturated_activation":
        return f"{where}: {_pct(value)} of its outputs saturated from step {step} (was {_pct(before)})."
    if kind == "activation_collapse":
        return f"{where}: its output is constant from step {step} (std {fmt(value)})."
    if kind == "activation_explosion":
        head = f"{where}: activations explode from step {step} (max |x| {fmt(before)} -> {fmt(value)})."
        if extra.get("amplified") == "cumulative":
            head += " The layers up to here amplify the batch over a thousandfold together."
        return head
    if kind == "no_gradient":
        return (f"{where}: no gradient reaches its parameters from step {step} "
                f"({fmt(value)} parameter(s) without .grad).")
    if kind == "frozen_weights":
        return (f"{where}: its parameters get gradients but never change from step {step} "
                f"(update ratio {fmt(value)}).")
    if kind == "data_anomaly":
        reason = extra.get("reason")
        if reason == "nonfinite":
            return (f"<input>: the batch at step {step} contains non-finite values. Check the data "
                    "pipeline (missing values, division by 0 in preprocessing).")
        if reason == "constant":
            return (f"<input>: the batch at step {step} is constant (std {fmt(extra.get('std'))}). "
                    "Check the data pipeline (an empty or padded batch, a broken augmentation).")
        return (f"<input>: the batch at step {step} is far outside the recent distribution "
                f"(max |x| {fmt(before)} -> {fmt(value)}). Check normalisation and the data source.")
    if kind == "loss_spike":
        return f"<loss>: the loss spiked to {fmt(value)} at step {step} (recent level {fmt(before)})."
    if kind == "loss_plateau":
        k = extra.get("num_classes")
        if extra.get("reason") == "chance" and k:
            return (f"<loss>: the loss stays at chance level from step {step} ({fmt(value)}, "
                    f"ln({k}) = {fmt(math.log(k))} for {k} classes; it started at {fmt(before)}).")
        return (f"<loss>: the loss has not fallen since step {step} ({fmt(before)} -> "
                f"{fmt(value)}).")
    if kind == "initial_loss":
        k = extra.get("num_classes")
        return (f"<loss>: initial loss {fmt(value)} is far from ln({k}) = {fmt(before)} expected "
                f"for {k}-class cross-entropy at initialisation.")
    if kind == "scaler_collapse":
        origin = extra.get("origin")
        seen = f", first seen in {origin}" if origin else ""
        return (f"<optimizer>: the GradScaler scale collapsed from step {step} ({fmt(before)} -> "
                f"{fmt(value)}, skipped steps in a row{seen}).")
    return f"{where}: {from_state} -> {to_state} at step {step}."
